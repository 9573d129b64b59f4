//! SQL of jobs' output in the database: each node copies what its jobs write into
//! `job_log_chunks`, so that any portal can show and tail a log wherever the job ran (and
//! while its node is unreachable, up to what was copied).

use super::*;

repository!(
    /// Jobs' output, copied from their log files into the database.
    JobLogs, job_logs
);

/// One of a job's output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

impl JobLogs<'_> {
    /// Jobs whose cards are on `node` and whose output may still grow or be uncopied: running,
    /// or ended since `since`. With their log directory's name.
    pub async fn jobs_logging_on(
        &self,
        node: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<(i64, String, bool)>, StoreError> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT j.id, j.log_dir, j.state FROM jobs j
             WHERE j.log_dir IS NOT NULL AND (j.state = 'running' OR j.ended_at >= $2)
               AND EXISTS (SELECT 1 FROM booking_gpus bg JOIN gpus g ON g.id = bg.gpu_id
                           JOIN nodes n ON n.id = g.node_id
                           WHERE bg.booking_id = j.booking_id AND n.name = $1)",
        )
        .bind(node)
        .bind(Stamp(since))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, dir, state)| (id, dir, state != "running"))
            .collect())
    }

    /// How many bytes of a job's stream the database holds.
    pub async fn log_copied(&self, job: i64, stream: Stream) -> Result<u64, StoreError> {
        let end: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(offset_bytes + LENGTH(data)) FROM job_log_chunks
             WHERE job_id = $1 AND stream = $2",
        )
        .bind(job)
        .bind(stream.as_str())
        .fetch_one(&self.pool)
        .await?;
        Ok(end.unwrap_or(0).max(0) as u64)
    }

    /// Appends `data`, which starts at `offset` of the stream. Copying the same part again
    /// (after a restart) changes nothing.
    pub async fn append(
        &self,
        job: i64,
        stream: Stream,
        offset: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO job_log_chunks (job_id, stream, offset_bytes, data) VALUES ($1, $2, $3, $4)
             ON CONFLICT (job_id, stream, offset_bytes) DO NOTHING",
        )
        .bind(job)
        .bind(stream.as_str())
        .bind(offset as i64)
        .bind(data.to_vec())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The copied part of a job's stream from `offset` on, up to about `max` bytes (whole
    /// chunks, the first one cut to start at `offset`; a live tail asks for the next piece
    /// each time, so at most [`CHUNKS_PER_READ`] rows are read).
    pub async fn from(
        &self,
        job: i64,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> Result<Vec<u8>, StoreError> {
        self.read_log(job, stream, offset, max, CHUNKS_PER_READ)
            .await
    }

    /// All of the copied part of a job's stream.
    pub async fn whole(&self, job: i64, stream: Stream) -> Result<Vec<u8>, StoreError> {
        self.read_log(job, stream, 0, usize::MAX, i64::MAX).await
    }

    async fn read_log(
        &self,
        job: i64,
        stream: Stream,
        offset: u64,
        max: usize,
        rows: i64,
    ) -> Result<Vec<u8>, StoreError> {
        let chunks: Vec<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT offset_bytes, data FROM job_log_chunks
             WHERE job_id = $1 AND stream = $2 AND offset_bytes + LENGTH(data) > $3
             ORDER BY offset_bytes LIMIT $4",
        )
        .bind(job)
        .bind(stream.as_str())
        .bind(offset as i64)
        .bind(rows)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        let mut at = offset;
        for (start, data) in chunks {
            let start = start.max(0) as u64;
            if start > at || out.len() >= max {
                break; // a gap: what follows is not copied yet
            }
            let skip = (at - start) as usize;
            out.extend_from_slice(&data[skip.min(data.len())..]);
            at = start + data.len() as u64;
        }
        Ok(out)
    }
}

/// Rows one piece of a live tail reads at most (each holds up to 256 KiB, most far less).
const CHUNKS_PER_READ: i64 = 64;
