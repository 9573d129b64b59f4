//! The live channel of a real server: snapshot first, then ticks; slow clients are dropped
//! without holding up anyone else.

use futures::StreamExt;
use lanes_tests::TestApp;
use lanes_types::TelemetryMessage;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;

async fn next_message<S>(ws: &mut S) -> TelemetryMessage
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message within 5 s")
            .expect("the socket stays open")
            .expect("no protocol error");
        if let Message::Text(text) = msg {
            return serde_json::from_str(&text).expect("a documented message");
        }
    }
}

#[tokio::test]
async fn a_client_gets_a_snapshot_then_a_tick_per_poll() {
    let app = TestApp::spawn(4).await;
    let mut live = app
        .client_with(&app.viewer_cookie().await)
        .telemetry()
        .await
        .unwrap();
    let mut next = async || {
        live.next()
            .await
            .expect("a message")
            .expect("a documented message")
    };
    let TelemetryMessage::Snapshot(snapshot) = next().await else {
        panic!("the first message is not a snapshot")
    };
    assert_eq!(snapshot.gpus.len(), 4);
    assert_eq!(snapshot.interval_ms, 50);
    assert!(snapshot.gpus.iter().all(|g| g.sample.is_some()));
    let mut last_at = 0;
    for _ in 0..3 {
        let TelemetryMessage::Tick { at_ms, gpus } = next().await else {
            panic!("a second snapshot")
        };
        assert!(at_ms > last_at, "ticks move forward");
        last_at = at_ms;
        assert_eq!(gpus.len(), 4);
        assert!(gpus
            .iter()
            .all(|g| g.sample.as_ref().map(|s| s.at_ms) == Some(at_ms)));
    }
    app.stop().await;
}

#[tokio::test]
async fn clients_are_closed_cleanly_when_the_server_shuts_down() {
    let app = TestApp::spawn(2).await;
    let (mut ws, _) =
        tokio_tungstenite::connect_async(app.ws_request("/api/v1/telemetry/ws").await)
            .await
            .unwrap();
    next_message(&mut ws).await;
    app.stop().await;
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(msg)) = ws.next().await {
            if let Message::Close(frame) = msg {
                return frame.map(|f| u16::from(f.code));
            }
        }
        None
    })
    .await
    .expect("the socket ends within 5 s");
    assert_eq!(closed, Some(1001));
}

#[tokio::test]
async fn a_client_that_never_reads_is_dropped_and_others_keep_their_pace() {
    // Many cards make big ticks, so the stuck client's buffers fill quickly.
    let app = TestApp::spawn(64).await;
    let cookie = app.viewer_cookie().await;

    // A raw socket with a tiny receive buffer that completes the upgrade and then never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(app.addr).await.unwrap();
    let request = format!(
        "GET /api/v1/telemetry/ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: {cookie}\r\n\r\n",
        app.addr
    );
    tokio::io::AsyncWriteExt::write_all(&mut stuck, request.as_bytes())
        .await
        .unwrap();

    let (mut good, _) =
        tokio_tungstenite::connect_async(app.ws_request("/api/v1/telemetry/ws").await)
            .await
            .unwrap();
    next_message(&mut good).await;

    // Over 12 s the stuck client fills every buffer and hits the send timeout; the good client
    // must keep receiving ticks at the poll rate all along.
    let started = Instant::now();
    let mut ticks = 0;
    let mut longest_gap = Duration::ZERO;
    let mut last = Instant::now();
    while started.elapsed() < Duration::from_secs(12) {
        next_message(&mut good).await;
        ticks += 1;
        longest_gap = longest_gap.max(last.elapsed());
        last = Instant::now();
    }
    assert!(ticks > 150, "only {ticks} ticks in 12 s at a 50 ms poll");
    assert!(
        longest_gap < Duration::from_secs(1),
        "a {longest_gap:?} stall"
    );

    // The server has given up on the stuck client: draining its socket reaches the end.
    let drained = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match stuck.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the stuck client was never dropped");
    app.stop().await;
}

#[tokio::test]
async fn the_live_channel_needs_a_login() {
    let app = TestApp::spawn(1).await;
    let refused = app.anonymous().telemetry().await.err();
    assert_eq!(
        refused
            .as_ref()
            .and_then(|e| e.status())
            .map(|s| s.as_u16()),
        Some(401),
        "{refused:?}"
    );
    app.stop().await;
}

/// A page that lists jobs or bookings follows the server's events over `?only=changes`: a
/// booking says "bookings changed" to a logged-in viewer at once, with no snapshot or tick on
/// that channel; an anonymous viewer may not open it.
#[tokio::test]
async fn a_changes_channel_says_which_lists_changed_and_needs_a_login() {
    use lanes_types::booking::CreateBooking;
    use lanes_types::Area;
    let app = TestApp::spawn(2).await;
    let refused = app.anonymous().changes().await.err().expect("refused");
    assert!(refused.to_string().contains("401"), "{refused}");
    let member = app.client_with(&app.viewer_cookie().await);
    let mut changes = member.changes().await.unwrap();
    let start = chrono::Utc::now() + chrono::Duration::minutes(5);
    member
        .book(&CreateBooking {
            project: None,
            count: Some(1),
            start,
            end: start + chrono::Duration::hours(1),
            gpus: None,
            note: String::new(),
            user: None,
            lend: None,
        })
        .await
        .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("a message within 5 s")
        .expect("the channel stays open")
        .expect("a documented message");
    let TelemetryMessage::Changed { areas } = message else {
        panic!("only changes on this channel: {message:?}")
    };
    assert!(areas.contains(&Area::Bookings), "{areas:?}");
    app.stop().await;
}
