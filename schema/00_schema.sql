-- Schema, sequences and the shared vocabulary of the extension.
--
-- Every table that holds per-item rows carries queue_name as the first
-- column of its primary key, so the extension stays distributable by queue
-- (see the scale-out notes in README.md).  Item ids and lease tokens come
-- from two global sequences: unique per queue, roughly increasing.

CREATE SEQUENCE queue.item_id_seq;
CREATE SEQUENCE queue.lease_token_seq;
CREATE SEQUENCE queue.event_id_seq;
CREATE SEQUENCE queue.failure_id_seq;
CREATE SEQUENCE queue.alert_id_seq;
CREATE SEQUENCE queue.maintenance_id_seq;
