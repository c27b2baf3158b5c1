//! The auth parts on their own: roles, the tokens file, the header and address parsers (with a
//! property test: no input panics them), the authenticator (proxies, expiry, reload) and the
//! listen check. The route matrix over the whole router is in `matrix.rs`.

use std::net::IpAddr;

use proptest::prelude::*;

use super::tokens::TokenMatch;
use super::*;

const NOW: i64 = 1_800_000_000_000_000_000;
const DAY: i64 = 86_400_000_000_000;

#[test]
fn the_ladder_holds_every_right_below_and_ingest_stands_apart() {
    use Role::*;
    let ladder = [Viewer, Analyst, Operator, Admin];
    for (i, have) in ladder.iter().enumerate() {
        for (j, need) in ladder.iter().enumerate() {
            assert_eq!(have.grants(*need), i >= j, "{have} for {need}");
        }
        assert_eq!(have.grants(Ingest), *have == Admin, "{have} ingesting");
        assert!(!Ingest.grants(*have), "ingest must not read as {have}");
    }
    assert!(Ingest.grants(Ingest));
    assert_eq!(Role::parse("operator"), Ok(Operator));
    assert!(Role::parse("root").unwrap_err().contains("viewer"));
}

#[test]
fn tokens_are_stored_hashed_in_a_private_file_and_found_in_constant_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("tokens.json");
    let mut file = TokenFile::read(&path).unwrap();
    assert!(file.tokens.is_empty(), "a missing file holds no token");
    let reader = file
        .create("reader", Role::Viewer, vec![], None, NOW)
        .unwrap();
    let exporter = file
        .create(
            "exporters",
            Role::Ingest,
            vec!["team-a".into()],
            Some(NOW + DAY),
            NOW,
        )
        .unwrap();
    assert!(
        reader.starts_with(tokens::TOKEN_PREFIX) && reader.len() == 68,
        "{reader}"
    );
    assert_ne!(reader, exporter);
    let duplicate = file.create("reader", Role::Admin, vec![], None, NOW);
    assert!(duplicate.unwrap_err().to_string().contains("exists"));
    file.write(&path).unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains(&reader) && !text.contains(&reader[4..]),
        "{text}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let set = TokenFile::read(&path).unwrap().to_set().unwrap();
    match set.find(&exporter, NOW) {
        TokenMatch::Valid(t) => {
            assert_eq!((t.name.as_str(), t.role), ("exporters", Role::Ingest));
            assert_eq!(t.tenants, ["team-a"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        set.find(&exporter, NOW + 2 * DAY),
        TokenMatch::Expired(_)
    ));
    assert!(matches!(
        set.find(&reader, NOW + 365 * DAY),
        TokenMatch::Valid(_)
    ));
    let mut wrong = reader.clone();
    wrong.replace_range(10..11, if &reader[10..11] == "0" { "1" } else { "0" });
    assert_eq!(set.find(&wrong, NOW), TokenMatch::Unknown);
    assert_eq!(set.find("", NOW), TokenMatch::Unknown);

    let mut file = TokenFile::read(&path).unwrap();
    assert_eq!(file.revoke("reader").unwrap().name, "reader");
    assert!(matches!(
        file.revoke("reader"),
        Err(TokenError::NoSuchToken(_))
    ));
    file.write(&path).unwrap();
    let set = TokenFile::read(&path).unwrap().to_set().unwrap();
    assert_eq!(set.find(&reader, NOW), TokenMatch::Unknown);
}

#[test]
fn a_bad_tokens_file_names_every_problem() {
    let text = r#"{"version": 2, "tokens": [
        {"name": "a b", "role": "viewer", "created": "2026-01-01T00:00:00Z", "sha256": "00"},
        {"name": "x", "role": "viewer", "created": "yesterday", "expires": "never",
         "sha256": "0000000000000000000000000000000000000000000000000000000000000000"},
        {"name": "x", "role": "viewer", "created": "2026-01-01T00:00:00Z",
         "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}]}"#;
    let problem = TokenFile::parse(text).unwrap_err();
    for expected in [
        "version 2",
        "tokens[0]: token name",
        "tokens[0].sha256",
        "tokens[1].created",
        "tokens[1].expires",
        "tokens[2]: the name `x` is used twice",
    ] {
        assert!(problem.contains(expected), "`{expected}` in {problem}");
    }
    let role = TokenFile::parse(
        r#"{"version":1,"tokens":[{"name":"a","role":"root","created":"x","sha256":"x"}]}"#,
    );
    assert!(role.unwrap_err().contains("root"));
}

#[test]
fn bearer_headers_and_proxy_addresses_parse_strictly() {
    assert_eq!(parse_bearer(b"Bearer ist_abc"), Ok("ist_abc"));
    assert_eq!(
        parse_bearer(b"bearer   a.b-c_d~e+f/g=="),
        Ok("a.b-c_d~e+f/g==")
    );
    for bad in [
        &b"Basic dXNlcjpwYXNz"[..],
        b"Bearer",
        b"Bearer ",
        b"Bearer a b",
        b"Bearer \xff\xfe",
        b"ist_abc",
        b"Bearer ===",
    ] {
        assert!(
            parse_bearer(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let long = format!("Bearer {}", "a".repeat(tokens::MAX_BEARER_BYTES + 1));
    assert!(parse_bearer(long.as_bytes()).is_err());

    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let net = Cidr::parse("10.1.0.0/16").unwrap();
    assert!(net.contains(ip("10.1.200.3")) && !net.contains(ip("10.2.0.1")));
    assert!(
        net.contains(ip("::ffff:10.1.0.9")),
        "IPv4-mapped peers count as IPv4"
    );
    assert!(Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.1")));
    assert!(!Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.2")));
    assert!(Cidr::parse("::1/128").unwrap().contains(ip("::1")));
    assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
    assert!(!Cidr::parse("fd00::/8").unwrap().contains(ip("10.0.0.1")));
    for bad in ["10.0.0.0/33", "10.0.0/8", "::/129", "x", "10.0.0.0/-1", ""] {
        assert!(Cidr::parse(bad).is_err(), "{bad}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_header_and_address_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_bearer(&bytes);
        let mut prefixed = b"Bearer ".to_vec();
        prefixed.extend_from_slice(&bytes);
        if let Ok(token) = parse_bearer(&prefixed) {
            prop_assert!(!token.is_empty() && token.len() <= tokens::MAX_BEARER_BYTES);
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(cidr) = Cidr::parse(&text) {
            let _ = cidr.contains(IpAddr::from([127, 0, 0, 1]));
        }
    }

    #[test]
    fn the_tokens_file_parser_never_panics(
        text in "\\PC{0,300}",
        name in "\\PC{0,80}",
        role in "[a-z]{0,10}",
        hash in "[0-9a-fA-Fg]{0,70}",
        time in "\\PC{0,40}",
    ) {
        let _ = TokenFile::parse(&text);
        let json = serde_json::json!({"version": 1, "tokens": [
            {"name": name, "role": role, "created": time, "expires": time, "sha256": hash,
             "tenants": [name]}]})
        .to_string();
        if let Ok(file) = TokenFile::parse(&json) {
            let set = file.to_set().unwrap();
            let _ = set.find(&text, NOW);
        }
    }
}

fn settings(dir: &std::path::Path, proxies: &[&str]) -> AuthSettings {
    AuthSettings {
        tokens_file: Some(dir.join("tokens.json")),
        trusted_proxies: proxies.iter().map(|p| Cidr::parse(p).unwrap()).collect(),
        proxy_role: Role::Viewer,
    }
}

fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn proxy_headers_name_the_caller_only_from_trusted_proxies() {
    let proxy = Some(IpAddr::from([10, 0, 0, 5]));
    let stranger = Some(IpAddr::from([192, 168, 1, 9]));
    let user = [("x-forwarded-user", "alice")];

    // off: everyone is an admin; the header counts only from a trusted proxy
    let open = Auth::disabled();
    let who = open
        .authenticate(None, headers(&user), stranger, NOW)
        .unwrap();
    assert_eq!(
        (who.name.as_str(), who.role, who.via),
        (ANONYMOUS, Role::Admin, Via::Open)
    );
    let dir = tempfile::tempdir().unwrap();
    let open_behind_proxy = Auth::open(AuthSettings {
        tokens_file: None,
        ..settings(dir.path(), &["10.0.0.0/8"])
    })
    .unwrap();
    let who = open_behind_proxy
        .authenticate(None, headers(&user), proxy, NOW)
        .unwrap();
    assert_eq!(who.name, "alice");

    // on: a proxied user gets the proxy role; a stranger's header is no identity
    let on = Auth::open(settings(dir.path(), &["10.0.0.0/8"])).unwrap();
    let who = on.authenticate(None, headers(&user), proxy, NOW).unwrap();
    assert_eq!(
        (who.name.as_str(), who.role, who.via),
        ("alice", Role::Viewer, Via::Proxy)
    );
    let refused = on.authenticate(None, headers(&user), stranger, NOW);
    assert!(
        matches!(refused, Err(Refusal::Unauthenticated(_))),
        "{refused:?}"
    );
    let refused = on.authenticate(None, headers(&[]), proxy, NOW);
    assert!(
        matches!(refused, Err(Refusal::Unauthenticated(_))),
        "{refused:?}"
    );
}

#[test]
fn the_tokens_file_is_reread_when_it_changes_and_a_bad_version_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path(), &[]);
    let path = settings.tokens_file.clone().unwrap();
    let auth = Auth::open(settings).unwrap();
    let check = |token: &str| {
        auth.authenticate(
            Some(format!("Bearer {token}").as_bytes()),
            headers(&[]),
            None,
            NOW,
        )
    };
    assert!(matches!(
        check("ist_nothing"),
        Err(Refusal::Unauthenticated(_))
    ));

    let mut file = TokenFile::default();
    let token = file
        .create("ops", Role::Operator, vec![], None, NOW)
        .unwrap();
    file.write(&path).unwrap();
    assert!(auth.reload_if_changed().unwrap());
    assert_eq!(check(&token).unwrap().role, Role::Operator);
    assert!(
        !auth.reload_if_changed().unwrap(),
        "unchanged: not read again"
    );

    std::fs::write(&path, "{ not json").unwrap();
    assert!(auth.reload_if_changed().is_err());
    assert_eq!(
        check(&token).unwrap().name,
        "ops",
        "the last good tokens stay"
    );
    assert!(
        !auth.reload_if_changed().unwrap(),
        "a bad version is reported once"
    );

    file.revoke("ops").unwrap();
    file.write(&path).unwrap();
    assert!(auth.reload_if_changed().unwrap());
    assert!(matches!(check(&token), Err(Refusal::Unauthenticated(_))));
}

#[test]
fn serving_beyond_loopback_needs_authentication_or_an_explicit_opt_out() {
    let public = IpAddr::from([0, 0, 0, 0]);
    let config = AuthConfig::default();
    assert!(config.check_listen(IpAddr::from([127, 0, 0, 1])).is_ok());
    assert!(config.check_listen("::1".parse().unwrap()).is_ok());
    let refusal = config.check_listen(public).unwrap_err();
    assert!(refusal.contains("tokens_file") && refusal.contains("allow_unauthenticated"));
    let with_tokens = AuthConfig {
        tokens_file: "/etc/infersight/tokens.json".into(),
        ..AuthConfig::default()
    };
    assert!(with_tokens.check_listen(public).is_ok());
    let opted_out = AuthConfig {
        allow_unauthenticated: true,
        ..AuthConfig::default()
    };
    assert!(opted_out.check_listen(public).is_ok());

    let bad = AuthConfig {
        trusted_proxies: vec!["10.0.0.0/40".into()],
        proxy_role: "root".into(),
        ..AuthConfig::default()
    };
    let problems = bad.validate();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("auth.trusted_proxies[0]"));
    assert!(problems[1].starts_with("auth.proxy_role"));
}

#[test]
fn the_session_cookie_is_found_among_others() {
    let mut headers = axum::http::HeaderMap::new();
    assert_eq!(super::header::cookie_token(&headers), None);
    headers.append(
        axum::http::header::COOKIE,
        axum::http::HeaderValue::from_static("theme=dark; infersight_token=ist_abc ; other=1"),
    );
    assert_eq!(
        super::header::cookie_token(&headers).as_deref(),
        Some("ist_abc")
    );
    let mut empty = axum::http::HeaderMap::new();
    empty.append(
        axum::http::header::COOKIE,
        axum::http::HeaderValue::from_static("infersight_token="),
    );
    assert_eq!(super::header::cookie_token(&empty), None);
    let mut prefixed = axum::http::HeaderMap::new();
    prefixed.append(
        axum::http::header::COOKIE,
        axum::http::HeaderValue::from_static("xinfersight_token=ist_x"),
    );
    assert_eq!(super::header::cookie_token(&prefixed), None);
}
