-- set_limit's refusals name the argument and the value they refuse, as
-- create_queue's do, with a hint, and change nothing: the key keeps the
-- limit it had.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.create_queue('q_lr');
SELECT queue.set_limit('q_lr', 'k', max_in_flight => 2, rate => 5);
-- case: max_in_flight below 1 says max_in_flight and its value
SELECT queue.set_limit('q_lr', 'k', max_in_flight => 0);
-- case: rate below 1 says rate and its value, not max_in_flight
SELECT queue.set_limit('q_lr', 'k', max_in_flight => 3, rate => -1);
-- case: a per that is not positive says its value, as every interval does
SELECT queue.set_limit('q_lr', 'k', rate => 1, per => '0 s');
SELECT queue.set_limit('q_lr', 'k', rate => 1, per => '-1 min');
-- nothing changed
SELECT limit_key, max_in_flight, rate, per FROM queue.limits WHERE queue_name = 'q_lr';
SELECT queue.drop_queue('q_lr');
