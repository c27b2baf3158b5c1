//! The generic webhook sink: each transition as one JSON POST, signed so a receiver can tell it
//! came from this infersight and is not a replay. The signature is HMAC-SHA256, under the
//! configured secret, of the exact body bytes, sent hex-encoded as
//! `X-Infersight-Signature: sha256=<hex>`. The body carries `timestamp` (Unix seconds of the
//! attempt), repeated in `X-Infersight-Timestamp`: because the body is signed, the timestamp is
//! too, and a receiver rejects bodies older than its tolerance (5 minutes is usual). Every retry
//! is signed afresh with its own timestamp; `delivery_id` (also `X-Infersight-Delivery`) stays
//! the same across retries, for receivers that dedupe. [`verify`] is the receiver's check.

use hmac::{Hmac, Mac};
use infersight_model::time::format_rfc3339;
use serde_json::{Value, json};
use sha2::Sha256;

use super::config::Secret;
use super::delivery::{Channel, Event, Message, Request};

pub const SIGNATURE_HEADER: &str = "x-infersight-signature";
pub const TIMESTAMP_HEADER: &str = "x-infersight-timestamp";
pub const DELIVERY_HEADER: &str = "x-infersight-delivery";
pub const EVENT_HEADER: &str = "x-infersight-event";

/// Version of the body's layout; a receiver can refuse what it does not know.
pub const BODY_VERSION: &str = "1";

/// The signed-webhook sink.
#[derive(Debug)]
pub struct SignedWebhook {
    url: String,
    secret: Secret,
}

impl SignedWebhook {
    pub fn new(url: &str, secret: Secret) -> SignedWebhook {
        SignedWebhook {
            url: url.to_string(),
            secret,
        }
    }
}

/// `sha256=<hex of HMAC-SHA256(secret, body)>`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length; the error arm cannot happen
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + digest.len() * 2);
    out.push_str("sha256=");
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// The body of `event` at `now_ns`: what the receiver gets (and what is signed).
pub fn body(event: &Event, delivery_id: &str, now_ns: i64) -> Value {
    let notice = &event.notice;
    json!({
        "version": BODY_VERSION,
        "event": event.transition.as_str(),
        "delivery_id": delivery_id,
        "timestamp": now_ns.div_euclid(1_000_000_000),
        "sent_at": format_rfc3339(now_ns),
        "incident": {
            "id": notice.incident_id,
            "alertname": notice.alertname,
            "severity": notice.severity.as_str(),
            "summary": notice.summary,
            "description": notice.description,
            "cause": notice.cause,
            "cause_text": notice.cause.to_string(),
            "model": notice.model,
            "worker": notice.worker,
            "onset": format_rfc3339(notice.onset_ns),
            "detected_at": format_rfc3339(notice.detected_ns),
            "resolved_at": notice.resolved_ns.map(format_rfc3339),
            "report_url": event.report_url,
            "labels": notice.extra_labels,
        },
    })
}

impl Channel for SignedWebhook {
    fn sink(&self) -> &'static str {
        "webhook"
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn on_event(&mut self, event: &Event) -> Vec<Message> {
        let delivery_id = format!(
            "{}-{}-{}",
            event.notice.incident_id,
            event.transition.as_str(),
            event.at_ns
        );
        let what = format!(
            "incident {} {}",
            event.notice.incident_id,
            event.transition.as_str()
        );
        let event = event.clone();
        let secret = self.secret.clone();
        vec![Message {
            what,
            attempts: None,
            render: Box::new(move |now_ns| {
                let body = body(&event, &delivery_id, now_ns).to_string().into_bytes();
                let timestamp = now_ns.div_euclid(1_000_000_000).to_string();
                Request {
                    headers: vec![
                        ("content-type", "application/json".to_string()),
                        (SIGNATURE_HEADER, signature(secret.bytes(), &body)),
                        (TIMESTAMP_HEADER, timestamp),
                        (DELIVERY_HEADER, delivery_id.clone()),
                        (EVENT_HEADER, event.transition.as_str().to_string()),
                    ],
                    body,
                }
            }),
        }]
    }
}

/// Why a receiver should reject a delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signature header is not `sha256=<64 hex digits>`")]
    MalformedSignature,
    #[error("the signature does not match the body under this secret")]
    BadSignature,
    #[error("the body has no integer `timestamp`")]
    NoTimestamp,
    #[error("the timestamp header ({header}) differs from the signed body's ({body})")]
    TimestampMismatch { header: String, body: i64 },
    #[error("the delivery is {age_s} s from now, beyond the {tolerance_s} s tolerance (a replay?)")]
    Stale { age_s: i64, tolerance_s: i64 },
}

/// The receiver's check of one delivery: the signature over the exact body bytes (compared in
/// constant time), then the signed body's `timestamp` against the header and against `now_s`
/// (Unix seconds) within `tolerance_s`.
pub fn verify(
    secret: &[u8],
    body: &[u8],
    signature_header: &str,
    timestamp_header: &str,
    now_s: i64,
    tolerance_s: i64,
) -> Result<(), VerifyError> {
    let hex = signature_header
        .strip_prefix("sha256=")
        .filter(|h| h.len() == 64 && h.is_ascii())
        .ok_or(VerifyError::MalformedSignature)?;
    let mut expected = [0u8; 32];
    for (i, byte) in expected.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| VerifyError::MalformedSignature)?;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| VerifyError::BadSignature)?;
    mac.update(body);
    mac.verify_slice(&expected)
        .map_err(|_| VerifyError::BadSignature)?;
    let signed = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("timestamp").and_then(Value::as_i64))
        .ok_or(VerifyError::NoTimestamp)?;
    if timestamp_header.trim() != signed.to_string() {
        return Err(VerifyError::TimestampMismatch {
            header: timestamp_header.to_string(),
            body: signed,
        });
    }
    let age_s = now_s - signed;
    if age_s.abs() > tolerance_s {
        return Err(VerifyError::Stale { age_s, tolerance_s });
    }
    Ok(())
}
