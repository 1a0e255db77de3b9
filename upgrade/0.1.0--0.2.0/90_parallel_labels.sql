-- The access check takes the queue lock (and may load the settings cache
-- through SPI): neither it nor item(), which calls it, is parallel safe.

ALTER FUNCTION queue._check_access(text, text) VOLATILE PARALLEL UNSAFE;
ALTER FUNCTION queue.item(text, bigint) PARALLEL UNSAFE;
