-- queue: one enqueue_batch of the prepared 10k-payload array per transaction
SELECT count(*) FROM queue.enqueue_batch('bq', (SELECT a FROM bench_payloads));
