-- Each queue's alerts also go to a channel of its own whose name only the
-- roles that may read the queue are told (test/t/051_listen.pl listens).
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE regress_ac_reader LOGIN IN ROLE queue_reader;
CREATE ROLE regress_ac_other LOGIN IN ROLE queue_reader;
SELECT queue.create_queue('ac_closed');
SELECT queue.create_queue('ac_open');
SELECT queue.grant_queue('ac_closed', 'regress_ac_reader', 'reader');

-- case: a reader of the queue is told its channel: 'queue_alerts_' and 32
-- hex digits, the same on every call, another for another queue
SET ROLE regress_ac_reader;
SELECT queue.alert_channel('ac_closed') AS closed_channel \gset
SELECT :'closed_channel' ~ '^queue_alerts_[0-9a-f]{32}$' AS channel_form,
       queue.alert_channel('ac_closed') = :'closed_channel' AS same_again,
       queue.alert_channel('ac_open') <> :'closed_channel' AS another_for_another_queue;
RESET ROLE;

-- case: a role that may not read the queue is refused (42501), as for an
-- unknown queue (42704) and a malformed name (22023)
SET ROLE regress_ac_other;
SELECT queue.alert_channel('ac_closed');
SELECT queue.alert_channel('ac_missing');
SELECT queue.alert_channel('Bad Name');
RESET ROLE;

-- case: nobody reads the channels' table directly
SET ROLE regress_ac_other;
SELECT * FROM queue.alert_channels;
RESET ROLE;

-- case: a queue dropped and created again under its name gets a new channel
SELECT queue.drop_queue('ac_closed');
SELECT queue.create_queue('ac_closed');
SELECT queue.alert_channel('ac_closed') <> :'closed_channel' AS new_channel;

SELECT queue.drop_queue(q, force => true) FROM unnest('{ac_closed,ac_open}'::text[]) q;
DROP ROLE regress_ac_reader;
DROP ROLE regress_ac_other;
