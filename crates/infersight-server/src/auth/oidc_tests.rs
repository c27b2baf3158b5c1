//! JWT verification against a key set made here: an ES256 key (rcgen) and an RS256 key
//! (openssl, 2048 bits), tokens signed with ring. Accepted: either algorithm, the highest role
//! a list names, orgs, `exp` within the skew. Refused, each with its reason: another issuer,
//! another audience, expired, not yet valid, a changed payload, `alg: none`, HS256, an unknown
//! `kid`, a key of another set, no role. A rotated key set is picked up by `reload`. Through
//! `Auth`: a JWT goes to the verifier, a token of the tokens file still works.

use ring::rand::SystemRandom;
use ring::signature::{self, RsaKeyPair};
use serde_json::{Value, json};

use super::*;

const ISSUER: &str = "https://login.example.test/realms/ml";
const AUDIENCE: &str = "infersight";
const NOW: i64 = 1_800_000_000;

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Signs a JWT's signing input.
type Sign = Box<dyn Fn(&[u8]) -> Vec<u8>>;

/// A signer and its public JWK.
struct Signer {
    kid: String,
    alg: &'static str,
    sign: Sign,
    jwk: Value,
}

fn es256(kid: &str) -> Signer {
    let issuer = infersight_testkit::jwt::TestIssuer::new(kid);
    Signer {
        kid: kid.into(),
        alg: "ES256",
        jwk: issuer.jwk(),
        sign: Box::new(move |msg| issuer.sign_raw(msg)),
    }
}

fn rs256(kid: &str) -> Signer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rsa.der");
    let made = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-outform",
            "DER",
            "-out",
        ])
        .arg(&path)
        .output()
        .expect("openssl makes the test's RSA key");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // openssl 3 writes an RSA key as PKCS#1 in DER
    let pair = RsaKeyPair::from_der(&std::fs::read(&path).unwrap()).unwrap();
    let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    Signer {
        kid: kid.into(),
        alg: "RS256",
        jwk: json!({"kty": "RSA", "kid": kid, "n": b64(&public.n), "e": b64(&public.e)}),
        sign: Box::new(move |msg| {
            let mut out = vec![0; pair.public().modulus_len()];
            pair.sign(
                &signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                msg,
                &mut out,
            )
            .unwrap();
            out
        }),
    }
}

fn token(signer: &Signer, header: Value, claims: &Value) -> String {
    let mut header = header;
    if header.get("alg").is_none() {
        header["alg"] = json!(signer.alg);
    }
    if header.get("kid").is_none() {
        header["kid"] = json!(signer.kid);
    }
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    format!("{signed}.{}", b64(&(signer.sign)(signed.as_bytes())))
}

fn claims() -> Value {
    json!({"iss": ISSUER, "aud": [AUDIENCE, "account"], "sub": "alice", "exp": NOW + 300,
           "nbf": NOW - 10, "infersight_role": ["viewer", "analyst"],
           "infersight_orgs": ["team-a"], "email": "alice@example.test"})
}

fn verifier(dir: &std::path::Path, keys: &[&Signer]) -> Oidc {
    let path = dir.join("jwks.json");
    let jwks = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    std::fs::write(&path, jwks.to_string()).unwrap();
    let config = OidcConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks_file: path.display().to_string(),
        ..OidcConfig::default()
    };
    Oidc::open(config.settings().unwrap().unwrap()).unwrap()
}

#[test]
fn es256_and_rs256_tokens_name_their_caller_role_and_orgs() {
    let dir = tempfile::tempdir().unwrap();
    let (ec, rsa) = (es256("ec-1"), rs256("rsa-1"));
    let oidc = verifier(dir.path(), &[&ec, &rsa]);
    for signer in [&ec, &rsa] {
        let jwt = token(signer, json!({"typ": "JWT"}), &claims());
        assert!(looks_like_jwt(&jwt));
        let identity = oidc.verify(&jwt, NOW).unwrap();
        assert_eq!(identity.name, "oidc:alice", "{}", signer.alg);
        assert_eq!(identity.role, Role::Analyst);
        assert_eq!(identity.tenants, vec!["team-a".to_string()]);
    }
    // within the clock skew (60 s) an expired token still passes, beyond it not
    let mut late = claims();
    late["exp"] = json!(NOW - 30);
    assert!(oidc.verify(&token(&ec, json!({}), &late), NOW).is_ok());
    late["exp"] = json!(NOW - 61);
    assert!(oidc.verify(&token(&ec, json!({}), &late), NOW).is_err());
}

#[test]
fn a_token_is_refused_for_each_reason_with_that_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ec = es256("ec-1");
    let stranger = es256("ec-1");
    let oidc = verifier(dir.path(), &[&ec]);
    let with = |key: &str, value: Value| {
        let mut c = claims();
        c[key] = value;
        c
    };
    let good = token(&ec, json!({}), &claims());
    let (head, rest) = good.split_once('.').unwrap();
    let signature_part = rest.rsplit_once('.').unwrap().1;
    let tampered = format!(
        "{head}.{}.{signature_part}",
        b64(with("infersight_role", json!("admin"))
            .to_string()
            .as_bytes())
    );
    let unsigned = format!(
        "{}.{}.",
        b64(br#"{"alg":"none"}"#),
        b64(claims().to_string().as_bytes())
    );
    let cases: Vec<(String, &str)> = vec![
        (
            token(&ec, json!({}), &with("iss", json!("https://evil.test"))),
            "issuer",
        ),
        (
            token(&ec, json!({}), &with("aud", json!("grafana"))),
            "audience",
        ),
        (
            token(&ec, json!({}), &with("exp", json!(NOW - 3600))),
            "expired",
        ),
        (
            token(&ec, json!({}), &with("nbf", json!(NOW + 3600))),
            "not valid yet",
        ),
        (tampered, "signature"),
        (unsigned, "algorithm `none`"),
        (
            token(&ec, json!({"alg": "HS256"}), &claims()),
            "algorithm `HS256`",
        ),
        (token(&ec, json!({"kid": "ec-9"}), &claims()), "signature"),
        (token(&stranger, json!({}), &claims()), "signature"),
        ("eyJ.not-base64!.x".to_string(), "header"),
    ];
    for (jwt, says) in cases {
        match oidc.verify(&jwt, NOW) {
            Err(Refusal::Unauthenticated(why)) => assert!(why.contains(says), "{says}: {why}"),
            other => panic!("{says}: {other:?}"),
        }
    }
    let roleless = token(&ec, json!({}), &with("infersight_role", json!(["reader"])));
    assert!(matches!(
        oidc.verify(&roleless, NOW),
        Err(Refusal::Forbidden(_))
    ));
}

#[test]
fn a_rotated_key_set_is_picked_up_by_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (es256("2025"), es256("2026"));
    let oidc = verifier(dir.path(), &[&old]);
    let fresh = token(&new, json!({}), &claims());
    assert!(oidc.verify(&fresh, NOW).is_err());
    let jwks = json!({"keys": [new.jwk.clone()]});
    std::fs::write(dir.path().join("jwks.json"), jwks.to_string()).unwrap();
    assert_eq!(oidc.reload(), Ok(Some(1)));
    assert_eq!(oidc.reload(), Ok(None), "the same keys again: no change");
    assert!(oidc.verify(&fresh, NOW).is_ok());
    assert!(
        oidc.verify(&token(&old, json!({}), &claims()), NOW)
            .is_err()
    );
    // a broken key set keeps the keys in use
    std::fs::write(dir.path().join("jwks.json"), "{}").unwrap();
    assert!(oidc.reload().unwrap_err().contains("no `keys` array"));
    assert!(oidc.verify(&fresh, NOW).is_ok());
}

#[test]
fn the_section_is_validated_naming_its_keys() {
    assert_eq!(OidcConfig::default().settings(), Ok(None));
    let half = OidcConfig {
        issuer: ISSUER.into(),
        jwks_refresh: "1s".into(),
        ..OidcConfig::default()
    };
    let errors = half.settings().unwrap_err().join("\n");
    for needle in [
        "auth.oidc.audience",
        "jwks_file and jwks_url",
        "auth.oidc.jwks_refresh",
    ] {
        assert!(errors.contains(needle), "{needle}: {errors}");
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = OidcConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks_file: dir.path().join("none.json").display().to_string(),
        ..OidcConfig::default()
    };
    let error = Oidc::open(missing.settings().unwrap().unwrap()).unwrap_err();
    assert!(
        error.contains("auth.oidc.jwks_file: cannot read"),
        "{error}"
    );
}

#[test]
fn through_auth_a_jwt_is_verified_and_file_tokens_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let ec = es256("ec-1");
    let tokens_file = dir.path().join("tokens.json");
    let mut file = super::super::TokenFile::default();
    let secret = file
        .create("ops", Role::Operator, vec![], None, NOW * 1_000_000_000)
        .unwrap();
    file.write(&tokens_file).unwrap();
    let auth = super::super::Auth::open(super::super::AuthSettings {
        tokens_file: Some(tokens_file),
        trusted_proxies: Vec::new(),
        proxy_role: Role::Viewer,
    })
    .unwrap()
    .with_oidc(verifier(dir.path(), &[&ec]));
    let now_ns = NOW * 1_000_000_000;
    let ask = |token: &str| {
        let header = format!("Bearer {token}");
        auth.authenticate(Some(header.as_bytes()), |_| None, None, now_ns)
    };
    let jwt = token(&ec, json!({}), &claims());
    assert_eq!(ask(&jwt).unwrap().name, "oidc:alice");
    // an RS256 token is longer than any token of the file (here about 700 bytes)
    let rsa = rs256("rsa-1");
    let with_rsa = super::super::Auth::open(super::super::AuthSettings {
        tokens_file: Some(dir.path().join("tokens.json")),
        trusted_proxies: Vec::new(),
        proxy_role: Role::Viewer,
    })
    .unwrap()
    .with_oidc(verifier(dir.path(), &[&rsa]));
    let long = token(&rsa, json!({}), &claims());
    assert!(long.len() > super::super::tokens::MAX_TOKEN_BYTES);
    let header = format!("Bearer {long}");
    let identity = with_rsa.authenticate(Some(header.as_bytes()), |_| None, None, now_ns);
    assert_eq!(identity.unwrap().role, Role::Analyst);
    assert_eq!(ask(&secret).unwrap().role, Role::Operator);
    let foreign = token(&es256("ec-1"), json!({}), &claims());
    assert!(matches!(ask(&foreign), Err(Refusal::Unauthenticated(_))));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// Whatever arrives as a JWT (random parts, random bytes, JSON of the wrong shapes) is
    /// refused with a reason, never accepted and never a panic.
    #[test]
    fn any_jwt_shaped_input_is_refused_without_a_panic(
        header in proptest::prelude::any::<Vec<u8>>(),
        payload in proptest::prelude::any::<Vec<u8>>(),
        signature in proptest::prelude::any::<Vec<u8>>(),
        raw in "[A-Za-z0-9_.=-]{0,200}",
        alg in proptest::prop_oneof!["RS256", "ES256", "none", "HS256", ""],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let ec = es256("k");
        let oidc = verifier(dir.path(), &[&ec]);
        let shaped = format!("{}.{}.{}", b64(&header), b64(&payload), b64(&signature));
        let json_header = format!(
            "{}.{}.{}",
            b64(format!("{{\"alg\":\"{alg}\",\"kid\":\"k\"}}").as_bytes()),
            b64(&payload),
            b64(&signature)
        );
        for input in [shaped.as_str(), json_header.as_str(), raw.as_str()] {
            proptest::prop_assert!(oidc.verify(input, NOW).is_err(), "{}", input);
        }
    }
}

#[test]
fn oidc_needs_authentication_on() {
    let config = super::super::AuthConfig {
        oidc: OidcConfig {
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            jwks_url: "https://login.example.test/certs".into(),
            ..OidcConfig::default()
        },
        ..super::super::AuthConfig::default()
    };
    let errors = config.validate().join("\n");
    assert!(
        errors.contains("auth.oidc: needs auth.tokens_file"),
        "{errors}"
    );
    let on = super::super::AuthConfig {
        tokens_file: "/etc/infersight/tokens.json".into(),
        ..config
    };
    assert!(on.validate().is_empty(), "{:?}", on.validate());
}
