//! A webhook receiver for tests of what `serve` sends out (SLO alerts, automatic actions): a
//! plain HTTP/1.1 listener on 127.0.0.1 that answers every POST with a fixed status and hands
//! each body, parsed as JSON, to a channel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;

/// Starts the receiver; returns its address and the bodies it receives (a body that is not
/// JSON arrives as a JSON string, so a test sees it rather than losing it).
pub fn webhook_receiver(status: u16) -> (SocketAddr, mpsc::Receiver<serde_json::Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let answer =
                format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = reader.get_mut().write_all(answer.as_bytes());
            let value = serde_json::from_slice(&body).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&body).into_owned())
            });
            if tx.send(value).is_err() {
                return;
            }
        }
    });
    (addr, rx)
}
