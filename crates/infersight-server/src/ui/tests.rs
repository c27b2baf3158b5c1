//! The UI router: `/` and every asset answer 200 with their content type and the CSP; an
//! unknown asset is 404.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt as _;

use super::{ASSETS, CONTENT_SECURITY_POLICY, routes};

async fn get(path: &str) -> (StatusCode, String, String, String) {
    let response = routes::<()>()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let header_of = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let content_type = header_of(header::CONTENT_TYPE);
    let csp = header_of(header::CONTENT_SECURITY_POLICY);
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        content_type,
        csp,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

fn body_references(body: &str, name: &str) -> bool {
    body.contains(&format!("'./{name}'")) || body.contains(&format!("\"/ui/{name}\""))
}

#[tokio::test]
async fn index_and_every_asset_answer_with_their_content_type() {
    let (status, content_type, csp, body) = get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "text/html; charset=utf-8");
    assert_eq!(csp, CONTENT_SECURITY_POLICY);
    assert!(body.contains("<!DOCTYPE html>"));
    for asset in ASSETS {
        let (status, content_type, csp, body) = get(&format!("/ui/{}", asset.name)).await;
        assert_eq!(status, StatusCode::OK, "{}", asset.name);
        assert_eq!(content_type, asset.content_type, "{}", asset.name);
        assert_eq!(csp, CONTENT_SECURITY_POLICY, "{}", asset.name);
        assert!(!body.is_empty(), "{}", asset.name);
        // every asset is reachable: the page links the stylesheet and the entry module,
        // which imports the others
        let referenced = body_references(super::INDEX_HTML, asset.name)
            || ASSETS
                .iter()
                .any(|other| body_references(other.body, asset.name));
        assert!(referenced, "{} is not referenced", asset.name);
    }
}

#[tokio::test]
async fn unknown_assets_are_404() {
    for path in ["/ui/x", "/ui/app.js.map", "/ui/..%2Fmod.rs"] {
        let (status, ..) = get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
}

#[test]
fn the_policy_forbids_inline_script_and_foreign_origins() {
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-eval"));
    assert!(CONTENT_SECURITY_POLICY.contains("default-src 'none'"));
    for asset in ASSETS {
        // the SVG namespace is a name, not a load
        let body = asset.body.replace("'http://www.w3.org/2000/svg'", "");
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{} loads something from another origin",
            asset.name
        );
    }
}

/// The quoted colours of the JS constant `name` (`export const NAME = ['#…', …];`).
fn js_colours(body: &str, name: &str) -> Vec<String> {
    let start = body
        .find(&format!("export const {name} = ["))
        .unwrap_or_else(|| panic!("charts.js has no {name}"));
    let rest = &body[start..];
    let list = &rest[rest.find('[').unwrap() + 1..rest.find(']').unwrap()];
    list.split(',')
        .map(|c| c.trim().trim_matches('\'').to_string())
        .collect()
}

#[test]
fn the_ui_and_the_report_draw_with_one_palette() {
    let charts = ASSETS.iter().find(|a| a.name == "charts.js").unwrap().body;
    assert_eq!(
        js_colours(charts, "PALETTE"),
        infersight_report::charts::PALETTE.to_vec()
    );
    assert_eq!(
        js_colours(charts, "HEAT_STOPS"),
        infersight_report::charts::HEAT_STOPS.to_vec()
    );
    // the legend swatches of the stylesheet are the same series colours, in order
    let css = ASSETS.iter().find(|a| a.name == "app.css").unwrap().body;
    for (i, colour) in infersight_report::charts::PALETTE.iter().enumerate() {
        assert!(
            css.contains(&format!(".legend .s{i} {{ --swatch: {colour}; }}")),
            "app.css .legend .s{i} is not {colour}"
        );
    }
}
