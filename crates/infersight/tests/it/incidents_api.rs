//! The incidents API of `infersight serve` end to end: a simulated GPU memory leak is ingested
//! (before `serve` opens the same data directory: the store is locked by one process), then
//! `POST /api/v1/rca` stores verdicts as incidents, which are listed, reported in every format,
//! confirmed, and retrieved as a past incident by the next verdict's report.

use std::io::Read;

use serde_json::{Value, json};

use crate::support::{Server, agent, post, simulate_and_ingest};

/// GET on the API: status, content type, body.
fn get(server: &Server, path: &str) -> (u16, String, String) {
    let mut response = agent()
        .get(&format!("http://{}{path}", server.api))
        .call()
        .expect("GET");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut body = String::new();
    response
        .body_mut()
        .as_reader()
        .read_to_string(&mut body)
        .unwrap();
    (status, content_type, body)
}

/// POST a JSON body on the API: status and the parsed answer.
pub(crate) fn post_json(server: &Server, path: &str, body: &str) -> (u16, Value) {
    let (status, _, bytes) = post(
        &format!("http://{}{path}", server.api),
        "application/json",
        body.as_bytes(),
        false,
    );
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{path}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, value)
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn new_incident(server: &Server) -> (String, Value) {
    let (status, rca) = post_json(server, "/api/v1/rca", "{}");
    assert_eq!(status, 200, "rca: {rca}");
    let id = rca["incident_id"]
        .as_str()
        .unwrap_or_else(|| panic!("rca answers the stored incident's id: {rca}"))
        .to_string();
    (id, rca)
}

#[test]
fn incidents_are_stored_reported_confirmed_and_retrieved() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    simulate_and_ingest(
        dir.path(),
        &data,
        ("gpu_memory_leak", 1, "30m"),
        &[],
        &["traces.jsonl", "metrics.jsonl"],
    );
    let server = Server::start(&data, "[store]\nfsync = \"always\"\n");

    let (first, rca) = new_incident(&server);
    assert!(
        rca["signals"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["kind"] == "gpu_memory_leak")),
        "the leak is found: {rca}"
    );

    let (status, _, body) = get(&server, "/api/v1/incidents");
    assert_eq!(status, 200, "{body}");
    let list = json_of(&body);
    let row = list["incidents"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == json!(first)))
        .unwrap_or_else(|| panic!("{first} listed: {list}"));
    assert_eq!(row["status"], "open");
    assert_eq!(row["verdict"], rca["verdict"]);
    for key in ["created_at", "updated_at", "note", "symptom", "onset"] {
        assert!(row.get(key).is_some(), "{key} in {row}");
    }

    let (status, _, body) = get(&server, &format!("/api/v1/incidents/{first}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["rca"]["verdict"], rca["verdict"]);

    for (format, content_type) in [
        ("json", "application/json"),
        ("markdown", "text/markdown; charset=utf-8"),
        ("html", "text/html; charset=utf-8"),
    ] {
        let (status, ct, body) = get(
            &server,
            &format!("/api/v1/incidents/{first}/report?format={format}&llm=false"),
        );
        assert_eq!(status, 200, "{format}: {body}");
        assert_eq!(ct, content_type, "{format}");
        assert!(
            body.contains(&first),
            "the {format} report names the incident"
        );
        match format {
            "json" => assert_eq!(json_of(&body)["incident_id"], json!(first)),
            "html" => assert!(body.contains("<svg"), "the html report draws charts"),
            _ => {}
        }
    }

    let (status, confirmed) = post_json(
        &server,
        &format!("/api/v1/incidents/{first}/confirm"),
        r#"{"note": "rolled back the leaking build and restarted the workers"}"#,
    );
    assert_eq!(status, 200, "{confirmed}");
    assert_eq!(confirmed["status"], "confirmed");
    assert_eq!(
        confirmed["note"],
        "rolled back the leaking build and restarted the workers"
    );

    // the next verdict's report retrieves the confirmed one as a past incident
    let (second, _) = new_incident(&server);
    assert_ne!(second, first);
    let (status, _, body) = get(
        &server,
        &format!("/api/v1/incidents/{second}/report?format=json&llm=false"),
    );
    assert_eq!(status, 200, "{body}");
    let report = json_of(&body);
    let knowledge: Vec<&str> = report["knowledge"]
        .as_array()
        .map(|hits| hits.iter().filter_map(|h| h["id"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        knowledge.contains(&format!("incident:{first}").as_str()),
        "past incident retrieved: {knowledge:?}"
    );
    // a confirmed incident's own report does not cite itself
    let (_, _, body) = get(
        &server,
        &format!("/api/v1/incidents/{first}/report?llm=false"),
    );
    let own = json_of(&body);
    assert!(
        own["knowledge"].as_array().is_some_and(|hits| hits
            .iter()
            .all(|h| h["id"] != json!(format!("incident:{first}")))),
        "{}",
        own["knowledge"]
    );

    // errors: unknown id 404, bad id / format / body 400, each with a JSON error body
    let (status, _, body) = get(&server, "/api/v1/incidents/inc-19700101T000000Z-0000");
    assert_eq!(
        (status, json_of(&body)["error"]["kind"].clone()),
        (404, json!("not_found"))
    );
    let (status, _, body) = get(
        &server,
        "/api/v1/incidents/inc-19700101T000000Z-0000/report",
    );
    assert_eq!(
        (status, json_of(&body)["error"]["kind"].clone()),
        (404, json!("not_found"))
    );
    let (status, _, body) = get(&server, "/api/v1/incidents/..%2Fx");
    assert_eq!(
        (status, json_of(&body)["error"]["kind"].clone()),
        (400, json!("bad_request"))
    );
    let (status, _, body) = get(
        &server,
        &format!("/api/v1/incidents/{first}/report?format=pdf"),
    );
    assert_eq!(
        (status, json_of(&body)["error"]["kind"].clone()),
        (400, json!("bad_request"))
    );
    let (status, answer) = post_json(
        &server,
        &format!("/api/v1/incidents/{second}/confirm"),
        "{\"note\": ",
    );
    assert_eq!(
        (status, answer["error"]["kind"].clone()),
        (400, json!("bad_request"))
    );
    let (status, answer) = post_json(
        &server,
        "/api/v1/incidents/inc-19700101T000000Z-0000/reject",
        "{}",
    );
    assert_eq!(
        (status, answer["error"]["kind"].clone()),
        (404, json!("not_found"))
    );

    let (status, rejected) =
        post_json(&server, &format!("/api/v1/incidents/{second}/reject"), "{}");
    assert_eq!(status, 200, "{rejected}");
    assert_eq!(rejected["status"], "rejected");
    assert!(server.terminate().success());
}
