//! `lanes shell`: a member's own login shell inside one of their bookings, on its node.
//!
//! The node's Lanes listens on a local Unix socket (`--shell-socket`, mode 0666). It knows the
//! caller by what the kernel says of the connecting process (`SO_PEERCRED`: its uid and pid),
//! never by anything the caller sends: the uid must be the Unix account an admin gave a
//! member, and the booking must be that member's, active, on this node. Then the calling
//! process itself (it waits on the socket, so its pid is still its own) is moved into a
//! cgroup walled to the booking's cards, exactly as a job's is, and recorded as a running job
//! of the booking; the answer carries the variables a job gets (the mask, `LANES_JOB_ID`,
//! `LANES_NOTICE_FILE`, ...). The caller sets them and `exec`s the login shell in the same
//! process, so the shell and everything it starts is in the cgroup: accounted to the booking,
//! given notice and stopped with it, killed whole.
//!
//! Why not start the shell from the server and carry its terminal over the web socket: the
//! member's own terminal (tmux, ssh, VS Code's remote terminal) stays what it is, with its
//! resizing, its keys and its latency, and Lanes relays no keystrokes. The process that asks is
//! the one that moves; the runner then adopts it as it adopts a job that outlived a restart.

use super::launch;
use super::mask::{fixed_environment, DeviceMask, JobFacts};
use super::notice;
use super::wall::Wall;
use crate::audit::AuditAction;
use crate::runtime::limit::{Limiter, Rate, Slots};
use crate::store::{AuditEntry, BookingFilter, JobProcess, NewShell, Store};
use crate::telemetry::hub::Hub;
use crate::telemetry::procinfo;
use chrono::{DateTime, Utc};
use lanes_types::booking::{Booking, BookingState};
use lanes_types::coded::Coded;
use lanes_types::job::StartedIn;
use lanes_types::shell::{ShellAnswer, ShellJoined, ShellRequest};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

/// How long a caller has to send its one line (`lanes shell` sends it at once).
const REQUEST_WAIT: Duration = Duration::from_secs(2);
/// The longest request line read.
const REQUEST_MAX: u64 = 4096;
/// Connections the door holds at once for one Unix account, and for all: the socket is open
/// to every local account, so none of them may take the server's descriptors.
const HELD_PER_UID: usize = 4;
const HELD_IN_ALL: usize = 64;
/// Shells one account may open: a burst, then one more every few seconds. Each is a job,
/// audit lines, a cgroup and a run directory.
const OPENS: Rate = Rate {
    burst: 10,
    every: Duration::from_secs(6),
};
/// Accounts whose opens are remembered at once.
const OPENS_KEPT: usize = 4096;

/// What the door needs of the node.
pub struct ShellDoor {
    pub store: Store,
    pub hub: Arc<Hub>,
    pub node: String,
    pub wall: Arc<Wall>,
    pub jobs_dir: PathBuf,
    pub notice_dir: PathBuf,
    pub clock: crate::runtime::clock::Clock,
}

/// Why a shell was not opened, in the words the member reads.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refusal(String);

impl From<crate::store::StoreError> for Refusal {
    fn from(e: crate::store::StoreError) -> Self {
        Refusal(format!("the portal's database did not answer: {e}"))
    }
}

impl ShellDoor {
    /// Listens at `path` (a stale socket file there is replaced) until `shutdown`.
    pub fn start(self, path: PathBuf, shutdown: CancellationToken) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)?;
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(&path)?;
        // Anyone may knock: who they are comes from the kernel, not from the file's mode.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        tracing::info!(socket = %path.display(), "lanes shell: listening for members' shells");
        let door = Arc::new(Door {
            shell: self,
            held: Arc::new(Slots::new(HELD_PER_UID, HELD_IN_ALL)),
            opens: Limiter::new(OPENS, OPENS_KEPT),
        });
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = shutdown.cancelled() => break,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok((stream, _)) => {
                        // Who knocks is known at once; one beyond its account's share (or
                        // the door's) is told so and closed, never held.
                        let Ok(peer) = stream.peer_cred() else {
                            continue;
                        };
                        let uid = peer.uid();
                        let Some(held) = door.held.hold(uid) else {
                            let busy = refused(format!(
                                "too many lanes shell requests at once from uid {uid}; try \
                                 again in a moment"
                            ));
                            let _ = stream.try_write(answer_line(&busy).as_bytes());
                            continue;
                        };
                        let door = door.clone();
                        tokio::spawn(async move {
                            door.answer(stream, peer).await;
                            drop(held);
                        });
                    }
                    Err(e) => {
                        // Out of descriptors, most likely: wait a moment rather than spin.
                        tracing::warn!(error = %e, "lanes shell: accept failed");
                        tokio::select! {
                            () = shutdown.cancelled() => break,
                            () = tokio::time::sleep(Duration::from_millis(100)) => {}
                        }
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        });
        Ok(())
    }
}

/// The door and what it keeps of its callers: connections held, and shells opened lately.
struct Door {
    shell: ShellDoor,
    held: Arc<Slots<u32>>,
    opens: Limiter<u32>,
}

impl Door {
    /// Answers the one request on `stream`, from `peer` as the kernel told it at accept.
    async fn answer(&self, stream: UnixStream, peer: tokio::net::unix::UCred) {
        let uid = peer.uid();
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(read.take(REQUEST_MAX));
        let read = tokio::time::timeout(REQUEST_WAIT, reader.read_line(&mut line)).await;
        let answer = match read {
            Err(_) => refused(format!("no request within {} s", REQUEST_WAIT.as_secs())),
            Ok(Err(e)) => refused(format!("cannot read the request: {e}")),
            Ok(Ok(_)) => match serde_json::from_str::<ShellRequest>(&line) {
                Err(e) => refused(format!("not a request from lanes shell: {e}")),
                Ok(request) => match peer.pid() {
                    Some(pid) if pid > 0 => match self.open(uid, pid as u32, &request).await {
                        Ok(joined) => ShellAnswer::Joined(joined),
                        Err(Refusal(message)) => {
                            tracing::info!(uid, pid, %message, "lanes shell: refused");
                            ShellAnswer::Refused { message }
                        }
                    },
                    _ => refused("the kernel did not say which process is asking".into()),
                },
            },
        };
        let _ = write.write_all(answer_line(&answer).as_bytes()).await;
    }

    /// [`ShellDoor::open`], within the account's share of opens.
    async fn open(
        &self,
        uid: u32,
        pid: u32,
        request: &ShellRequest,
    ) -> Result<ShellJoined, Refusal> {
        if let Err(wait) = self.opens.take(&uid, std::time::Instant::now()) {
            return Err(Refusal(format!(
                "too many shells opened lately from this account; try again in {} s",
                wait.as_secs().max(1)
            )));
        }
        self.shell.open(uid, pid, request).await
    }
}

/// An answer as the one line the caller reads.
fn answer_line(answer: &ShellAnswer) -> String {
    let mut text = serde_json::to_string(answer).unwrap_or_default();
    text.push('\n');
    text
}

impl ShellDoor {
    /// Moves process `pid` of Unix user `uid` into the booking asked for and records it.
    async fn open(
        &self,
        uid: u32,
        pid: u32,
        request: &ShellRequest,
    ) -> Result<ShellJoined, Refusal> {
        if uid == 0 {
            return Err(Refusal(
                "a shell on booked cards runs as the member's own Unix account, never as root: \
                 run lanes shell as yourself"
                    .into(),
            ));
        }
        let now = self.clock.now();
        let (member, who) = self.member_of(uid).await?;
        let booking = self.booking_of(&member, request.booking, now).await?;
        // The process asking must still be the one that connected, and the caller's own.
        let stat =
            procinfo::stat(pid).ok_or_else(|| Refusal("the asking process is gone".into()))?;
        if process_uid(pid) != Some(uid) {
            return Err(Refusal("the asking process is not the caller's".into()));
        }
        // One process joins one booking once: a shell already inside a job stays where it is.
        if let Some(cgroup) = self.wall.cgroup_of(pid) {
            return Err(Refusal(format!(
                "this process is already inside a Lanes job ({cgroup}); leave that shell first"
            )));
        }
        let inventory: Vec<_> = self.hub.local_gpus().into_iter().map(|g| g.info).collect();
        let mask = DeviceMask::for_cards(&booking.gpus, &self.node, &inventory)
            .map_err(|e| Refusal(e.to_string()))?;
        let run = super::new_run_dir(&self.jobs_dir, "shell").map_err(io_refusal)?;
        let notice_file = notice::file_of(&self.notice_dir, &run);
        if let Err(e) = notice::prepare(&self.notice_dir, &run) {
            tracing::warn!(error = %e, "lanes shell: no notice directory; the signal alone");
        }
        let cgroup = self
            .wall
            .create_labelled(&run, mask.uuids())
            .map_err(|e| Refusal(e.to_string()))?;
        let wall_line = self.wall.describe_for(cgroup.as_ref());
        if let Some(c) = &cgroup {
            if let Err(e) = c.admit(pid) {
                let _ = c.remove();
                return Err(Refusal(format!(
                    "cannot move the shell into its cgroup: {e}"
                )));
            }
        }
        let process = JobProcess {
            pid,
            start_ticks: stat.start_ticks,
            boot_id: procinfo::boot_id(),
        };
        let environment = StartedIn::Shell {
            user: who.name().into(),
            shell: who.shell().into(),
        }
        .code();
        let audit = AuditEntry::new(Some(member.id), AuditAction::ShellOpen, "").detail(format!(
            "booking {} on {}, pid {pid}",
            booking.id, self.node
        ));
        let recorded = self
            .store
            .jobs()
            .open_shell(
                &NewShell {
                    booking_id: booking.id,
                    user_id: member.id,
                    shell: who.shell(),
                    cwd: who.home(),
                    process: &process,
                    environment: &environment,
                    device_wall: &wall_line,
                    cgroup: cgroup.as_ref().map(|c| c.path.as_str()),
                    log_dir: &run,
                },
                audit,
                now,
            )
            .await;
        let job = match recorded {
            Ok(id) => id,
            Err(e) => {
                // Unrecorded, it must not stay in a cgroup nobody watches.
                if let Some(c) = &cgroup {
                    c.kill();
                }
                return Err(e.into());
            }
        };
        if booking.lent_to.is_some() {
            // The holder is back: what borrows the cards goes, with notice, as when their own
            // process appears there (the shell's processes are the shell job's, not "theirs").
            let audit = AuditEntry::new(Some(member.id), AuditAction::LoanReclaim, "")
                .detail("its holder opened a shell in it");
            if let Err(e) = self
                .store
                .lending()
                .reclaim_loans(booking.id, audit, now)
                .await
            {
                tracing::warn!(booking = booking.id, error = %e, "lanes shell: could not take back lent cards");
            }
        }
        let facts = JobFacts {
            job_id: job,
            booking_end: booking.end,
            notice_file: notice_file.display().to_string(),
            restart_count: 0,
        };
        let cards = mask.cards_named(&inventory);
        tracing::info!(job, booking = booking.id, user = %member.username, pid, "lanes shell: a member's shell joined their booking");
        Ok(ShellJoined {
            job,
            booking: booking.id,
            booking_end: booking.end,
            cards,
            device_wall: wall_line,
            environment: fixed_environment(&mask, &facts).into_iter().collect(),
        })
    }

    /// The enabled member whose Unix account has `uid`, and that account.
    async fn member_of(
        &self,
        uid: u32,
    ) -> Result<(lanes_types::account::User, launch::Identity), Refusal> {
        let users = self.store.accounts().list().await?;
        let mut found = None;
        for user in users.into_iter().filter(|u| u.enabled) {
            let Ok(who) = launch::identity(&user.username, user.unix_user.as_deref()) else {
                continue;
            };
            let user_uid = match who.ids_raw() {
                Some((u, _)) => u,
                // A server without root runs everyone as itself.
                None => nix::unistd::geteuid().as_raw(),
            };
            if user_uid == uid {
                found = Some((user, who));
                break;
            }
        }
        found.ok_or_else(|| {
            let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map_or(format!("uid {uid}"), |u| u.name);
            Refusal(format!(
                "no Lanes member has the Unix account {name}: an admin gives it to yours on \
                 the Admin page (Users, \"Unix account for jobs\")"
            ))
        })
    }

    /// The member's booking asked for, or their one active booking on this node.
    async fn booking_of(
        &self,
        member: &lanes_types::account::User,
        asked: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Booking, Refusal> {
        let here = |b: &Booking| b.gpus.iter().all(|g| g.node == self.node);
        if let Some(id) = asked {
            let booking = self.store.bookings().get(id, now).await?;
            // Someone else's booking reads as no booking: ids are not a way to learn of others'.
            let Some(booking) = booking.filter(|b| b.user_id == member.id) else {
                return Err(Refusal(format!("you have no booking #{id}")));
            };
            if booking.state != BookingState::Active {
                return Err(Refusal(format!(
                    "booking #{id} is not active now ({})",
                    booking.state.as_str()
                )));
            }
            if !here(&booking) {
                return Err(Refusal(format!(
                    "booking #{id} is on another node; run lanes shell there (this is {})",
                    self.node
                )));
            }
            if booking.loan_of.is_some() || booking.queue_job.is_some() {
                return Err(Refusal(format!(
                    "booking #{id} holds a queue job's cards; a shell goes into a booking you made"
                )));
            }
            return Ok(booking);
        }
        let filter = BookingFilter {
            from: Some(now),
            to: Some(now),
            user_id: Some(member.id),
            ..Default::default()
        };
        let mut active: Vec<Booking> = self
            .store
            .bookings()
            .list(&filter, now)
            .await?
            .into_iter()
            .filter(|b| b.state == BookingState::Active && here(b))
            .filter(|b| b.loan_of.is_none() && b.queue_job.is_none())
            .collect();
        match active.len() {
            0 => Err(Refusal(format!(
                "you have no active booking on {}: book cards first (lanes book --gpus 1 --for 4h)",
                self.node
            ))),
            1 => Ok(active.remove(0)),
            _ => Err(Refusal(format!(
                "you have several active bookings on {}: say which with --booking ({})",
                self.node,
                active
                    .iter()
                    .map(|b| format!("#{}", b.id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

fn refused(message: String) -> ShellAnswer {
    ShellAnswer::Refused { message }
}

fn io_refusal(e: std::io::Error) -> Refusal {
    Refusal(format!("cannot prepare the shell's run: {e}"))
}

/// The real uid of process `pid`, from `/proc/PID/status`.
fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
