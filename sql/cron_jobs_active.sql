-- enable_cron() leaves its two jobs active, and schedule() the job
-- queue_schedules: a job paused in pg_cron (cron.alter_job(..., active =>
-- false), or an UPDATE of cron.job) is enabled again, never left to run
-- nothing while the call says it registered it.
\set VERBOSITY terse
CREATE EXTENSION pg_cron;

-- case: enable_cron() after the jobs were paused
SELECT queue.enable_cron();
SELECT count(cron.alter_job(jobid, active => false)) AS paused FROM cron.job;
SELECT queue.enable_cron();
SELECT jobname, schedule, command, active FROM cron.job ORDER BY jobname;

-- case: with new schedules, the same
SELECT count(cron.alter_job(jobid, active => false)) AS paused FROM cron.job;
SELECT queue.enable_cron('*/5 * * * *', '*/2 * * * *');
SELECT jobname, schedule, active FROM cron.job ORDER BY jobname;
SELECT queue.disable_cron();

-- case: schedule() after the job queue_schedules was paused
SELECT queue.create_queue('cj_q');
SELECT queue.schedule('cj_q', 'hourly', '0 * * * *', '{}');
UPDATE cron.job SET active = false WHERE jobname = 'queue_schedules';
SELECT queue.schedule('cj_q', 'nightly', '0 2 * * *', '{}');
SELECT jobname, schedule, command, active FROM cron.job ORDER BY jobname;

SELECT cron.unschedule('queue_schedules');
SELECT queue.drop_queue('cj_q', force => true);
DROP EXTENSION pg_cron;
