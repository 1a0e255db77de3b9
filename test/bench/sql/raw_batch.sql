-- raw floor: one INSERT of the prepared 10k-payload array (comparison for enqueue_batch)
INSERT INTO rq (queue, payload) SELECT 'q1', p FROM unnest((SELECT a FROM bench_payloads)) p;
