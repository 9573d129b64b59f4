//! `lanes keep-log`: copies one of a job's output streams from a pipe into its log file, as it
//! comes (the live log never lags), up to a limit; past it, one marker line, and the rest is read
//! and dropped so the job never blocks on a full pipe or dies of SIGPIPE. A write that fails (a
//! full disk) ends the copying the same way: the job goes on, its log stops. The runner starts
//! one per stream, as root in a session of its own; it drops to the job's user before reading.

use std::io::{ErrorKind, Read, Write};

/// What a keeper did with its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    pub written: u64,
    pub dropped: u64,
    /// Whether the marker went out (the limit was reached).
    pub capped: bool,
}

/// The line that ends a log at its limit.
pub fn marker(limit: u64) -> String {
    format!("\n[lanes: this log reached its limit of {limit} bytes; further output is discarded]\n")
}

/// Copies `input` to `output` up to `limit` bytes, then the marker, then drains the rest.
pub fn copy(mut input: impl Read, mut output: impl Write, limit: u64) -> Kept {
    let mut buf = vec![0u8; 64 * 1024];
    let mut kept = Kept {
        written: 0,
        dropped: 0,
        capped: false,
    };
    let mut writable = true;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return kept,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return kept,
        };
        let room = usize::try_from(limit - kept.written).unwrap_or(usize::MAX);
        let take = n.min(room);
        if writable && take > 0 {
            if output.write_all(&buf[..take]).is_ok() {
                kept.written += take as u64;
            } else {
                writable = false;
            }
        }
        if take < n {
            kept.dropped += (n - take) as u64;
            if writable && !kept.capped {
                kept.capped = true;
                let _ = output.write_all(marker(limit).as_bytes());
            }
        }
    }
}

/// Runs the keeper on standard input and output: first becomes `uid`/`gid` (no supplementary
/// groups) when given, then copies. Exit status 0, or 2 when it could not drop privileges.
pub fn run(limit: u64, uid: Option<u32>, gid: Option<u32>) -> u8 {
    if let (Some(uid), Some(gid)) = (uid, gid) {
        let dropped = nix::unistd::setgroups(&[])
            .and_then(|()| nix::unistd::setgid(gid.into()))
            .and_then(|()| nix::unistd::setuid(uid.into()));
        if let Err(e) = dropped {
            eprintln!("lanes keep-log: cannot become uid {uid}: {e}");
            return 2;
        }
    }
    let stdout = std::io::stdout();
    copy(std::io::stdin().lock(), stdout.lock(), limit);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_under_the_limit_is_copied_whole() {
        let mut out = Vec::new();
        let kept = copy(&b"hello\n"[..], &mut out, 100);
        assert_eq!(out, b"hello\n");
        assert!(!kept.capped);
    }

    #[test]
    fn output_over_the_limit_ends_with_the_marker_and_the_rest_is_drained() {
        let input = vec![b'x'; 200_000];
        let mut out = Vec::new();
        let kept = copy(&input[..], &mut out, 100_000);
        assert_eq!(kept.written, 100_000);
        assert_eq!(kept.dropped, 100_000);
        assert!(kept.capped);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with(&marker(100_000)));
        assert_eq!(text.len(), 100_000 + marker(100_000).len());
    }

    /// A writer that fails: a full disk.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("no space left on device"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failing_write_stops_the_log_but_the_input_is_still_drained() {
        let mut input = std::io::Cursor::new(vec![b'x'; 300_000]);
        let kept = copy(&mut input, Full, 1 << 30);
        assert_eq!(kept.written, 0);
        assert_eq!(input.position(), 300_000, "everything was read");
    }
}
