//! A kernel message's round trip through the portal's proxy (`/sessions/ID/`) against the same
//! Jupyter reached directly on its Unix socket, in the same run, on one kernel: a
//! `kernel_info_request` on the shell channel and its reply, alternating between the two
//! websockets so that both see the same kernel in the same state. Then what an open, idle
//! session costs the server: its CPU over a quiet spell with the websocket open, and its RSS
//! with `idle_sockets` more websockets open and quiet.

use futures::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Socket<S> = tokio_tungstenite::WebSocketStream<S>;

#[derive(clap::Args)]
pub struct Args {
    /// The portal (a running `lanes serve`).
    #[arg(long)]
    pub portal: String,
    /// The session owner's API token.
    #[arg(long, env = "LANES_TOKEN")]
    pub token: String,
    #[arg(long)]
    pub session: i64,
    /// The session's socket, and the token Jupyter expects there (from the run's files).
    #[arg(long)]
    pub socket: String,
    #[arg(long)]
    pub jupyter_token: String,
    #[arg(long, default_value_t = 2000)]
    pub rounds: usize,
    /// The server's pid, for its CPU and RSS.
    #[arg(long)]
    pub pid: u32,
    #[arg(long, default_value_t = 30)]
    pub idle_seconds: u64,
    #[arg(long, default_value_t = 50)]
    pub idle_sockets: usize,
}

pub async fn run(args: Args) {
    let http = reqwest::Client::new();
    let base = format!(
        "{}/sessions/{}",
        args.portal.trim_end_matches('/'),
        args.session
    );
    let kernel: serde_json::Value = http
        .post(format!("{base}/api/kernels"))
        .bearer_auth(&args.token)
        .json(&serde_json::json!({"name": "python3"}))
        .send()
        .await
        .expect("the portal answers")
        .error_for_status()
        .expect("a kernel starts")
        .json()
        .await
        .expect("its id");
    let kernel = kernel["id"].as_str().expect("a kernel id").to_string();
    let channels = format!("/sessions/{}/api/kernels/{kernel}/channels", args.session);

    let through_portal = || async {
        let mut request = format!(
            "{}/api/kernels/{kernel}/channels",
            base.replacen("http", "ws", 1)
        )
        .into_client_request()
        .unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", args.token).parse().unwrap(),
        );
        tokio_tungstenite::connect_async(request)
            .await
            .expect("the kernel's websocket through the portal")
            .0
    };
    let mut proxied = through_portal().await;

    let stream = tokio::net::UnixStream::connect(&args.socket)
        .await
        .expect("Jupyter's socket");
    let mut request = format!("ws://localhost{channels}")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("token {}", args.jupyter_token).parse().unwrap(),
    );
    let (mut direct, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("the kernel's websocket on Jupyter's socket");

    // Warm both paths (the kernel's first replies are slower).
    for i in 0..50 {
        round_trip(&mut proxied, &format!("warm-p{i}")).await;
        round_trip(&mut direct, &format!("warm-d{i}")).await;
    }
    let (mut through, mut straight) = (Vec::new(), Vec::new());
    for i in 0..args.rounds {
        through.push(round_trip(&mut proxied, &format!("p{i}")).await);
        straight.push(round_trip(&mut direct, &format!("d{i}")).await);
    }
    for v in [&mut through, &mut straight] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let (p50t, p99t) = (
        crate::percentile(&through, 50.0),
        crate::percentile(&through, 99.0),
    );
    let (p50d, p99d) = (
        crate::percentile(&straight, 50.0),
        crate::percentile(&straight, 99.0),
    );
    println!(
        "## A kernel message's round trip (kernel_info_request → reply), {} rounds each, alternating",
        args.rounds
    );
    println!();
    println!("| path | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    println!("| direct: Jupyter's Unix socket | {p50d:.3} | {p99d:.3} |");
    println!(
        "| through the portal: /sessions/{}/ | {p50t:.3} | {p99t:.3} |",
        args.session
    );
    println!(
        "| **the proxy adds** | **{:.3}** | **{:.3}** |",
        p50t - p50d,
        p99t - p99d
    );
    println!();

    // An open, idle session: the websocket stays open, nothing is sent.
    let cpu0 = cpu_ticks(args.pid);
    let t0 = Instant::now();
    let quiet = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(args.idle_seconds);
        // Kernel status messages Jupyter sends on its own are read, not answered.
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                _ = proxied.next() => {}
            }
        }
    };
    quiet.await;
    let cpu = (cpu_ticks(args.pid) - cpu0) as f64 / clock_ticks() / t0.elapsed().as_secs_f64();
    let rss0 = crate::rss_kib(args.pid);
    let mut idle = Vec::new();
    for _ in 0..args.idle_sockets {
        idle.push(through_portal().await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = crate::rss_kib(args.pid);
    println!("## What an open, idle session costs the server");
    println!();
    println!("| measure | value |");
    println!("|---|---:|");
    println!(
        "| server CPU over {} s with the kernel's websocket open and quiet | {:.2} % of one core |",
        args.idle_seconds,
        100.0 * cpu
    );
    println!(
        "| server RSS per further open websocket ({} opened) | {:.1} KiB |",
        args.idle_sockets,
        (rss1 as f64 - rss0 as f64) / args.idle_sockets.max(1) as f64
    );
    drop(idle);
    let _ = http
        .delete(format!("{base}/api/kernels/{kernel}"))
        .bearer_auth(&args.token)
        .send()
        .await;
}

/// Sends a `kernel_info_request` and waits for its reply; milliseconds.
async fn round_trip<S>(socket: &mut Socket<S>, id: &str) -> f64
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let message = serde_json::json!({
        "header": {"msg_id": id, "username": "bench", "session": "bench",
                   "msg_type": "kernel_info_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "content": {}, "channel": "shell", "buffers": [],
    })
    .to_string();
    let start = Instant::now();
    socket.send(Message::text(message)).await.expect("sent");
    loop {
        let Some(Ok(Message::Text(text))) = socket.next().await else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if value["parent_header"]["msg_id"] == id
            && value["header"]["msg_type"] == "kernel_info_reply"
        {
            return start.elapsed().as_secs_f64() * 1000.0;
        }
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14 and stime 15 (1-based in proc(5)).
    let get = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(14) + get(15)
}

fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}
