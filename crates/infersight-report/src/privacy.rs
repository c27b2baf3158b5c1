//! What a caller who may not see personal fields (a `viewer`) gets of an incident and its
//! report, applied by the serving layer (`infersight-server`'s incident routes) just before it
//! answers: [`hide_personal`] over the JSON, [`crate::document::Report::without_personal`] for a
//! report in any format. The values of identifying attributes (a customer tenant, a session, a
//! user, request and trace ids, a client address) become `<hidden>` wherever they stand — as a
//! slice's value or as `key=value` inside a verdict, an evidence line or a suggestion — and log
//! templates are cut after a marker of request content (`prompt: <cut>`). Names of models,
//! workers, versions and policies, and every measure, stay.

use serde_json::Value;

/// What a hidden value reads as.
pub const HIDDEN: &str = "<hidden>";

/// Attribute keys whose values identify a person, a session or a request (lowercase).
pub const IDENTIFYING_KEYS: &[&str] = &[
    "session_id",
    "session.id",
    "request_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "prompt_hash",
    "enduser.id",
    "user",
    "user.id",
    "user_id",
    "user.email",
    "client.address",
    "gen_ai.request.id",
    "gen_ai.response.id",
];

/// Attribute keys naming the fleet's customer (a personal column of the access audit too).
const TENANT_KEYS: &[&str] = &["tenant", "tenant.id", "tenant_id"];

/// Keys whose string values are log templates.
const TEMPLATE_KEYS: &[&str] = &["template", "after_template"];

/// Markers after which a log template may carry request content; the rest is cut.
const CONTENT_MARKERS: &[&str] = &[
    "prompt:",
    "prompt=",
    "\"prompt\"",
    "prompt_token_ids",
    "messages:",
    "messages=",
    "\"messages\"",
    "output:",
    "completion:",
    "text:",
];

/// Cuts a log template after the first marker of request content (`prompt: …` → `prompt: <cut>`).
pub fn cut_content(template: &str) -> String {
    let lower = template.to_ascii_lowercase();
    match CONTENT_MARKERS
        .iter()
        .filter_map(|marker| lower.find(marker).map(|at| at + marker.len()))
        .min()
    {
        Some(end) if template.is_char_boundary(end) => format!("{} <cut>", &template[..end]),
        _ => template.to_string(),
    }
}

/// Whether values under `key` are personal: [`IDENTIFYING_KEYS`] and the tenant.
pub fn is_personal_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    IDENTIFYING_KEYS.contains(&key.as_str()) || TENANT_KEYS.contains(&key.as_str())
}

/// Hides every personal value in `value` (see the module docs); strings only, so the shape
/// (and what it deserializes into) stays the same.
pub fn hide_personal(value: &mut Value) {
    hide(value, None);
}

fn hide(value: &mut Value, key: Option<&str>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                hide(item, Some(key));
            }
        }
        // a list holds what its key names (`"tenants": [...]`)
        Value::Array(items) => {
            for item in items {
                hide(item, key);
            }
        }
        Value::String(text) => {
            if key.is_some_and(is_personal_key) {
                *text = HIDDEN.to_string();
                return;
            }
            if key.is_some_and(|key| TEMPLATE_KEYS.contains(&key)) {
                *text = cut_content(text);
            }
            *text = hide_pairs(text);
        }
        _ => {}
    }
}

/// `text` with the value of every `key=value` whose key is personal replaced by [`HIDDEN`]:
/// slices as the verdict writes them (`tenant=globex & model=m`, the value runs to the next
/// space or `& , ; ) ] } |`) and conditions as SQL writes them (`tenant = 'globex'`,
/// `tenant != "x"`: spaces around the sign, the quoted value).
pub fn hide_pairs(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while let Some(found) = lower[at..].find('=') {
        let eq = at + found;
        let key_end = lower[..eq].trim_end_matches('!').trim_end().len();
        let key_start = lower[..key_end]
            .char_indices()
            .rev()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let value_start = eq + 1 + (text[eq + 1..].len() - text[eq + 1..].trim_start().len());
        let value_end = match text[value_start..].chars().next() {
            Some(quote @ ('\'' | '"')) => text[value_start + 1..]
                .find(quote)
                .map_or(text.len(), |i| value_start + 1 + i + 1),
            _ => text[value_start..]
                .find(|c: char| {
                    c.is_whitespace()
                        || matches!(c, '&' | ',' | ';' | ')' | ']' | '}' | '|' | '"' | '\'')
                })
                .map_or(text.len(), |i| value_start + i),
        };
        if is_personal_key(&lower[key_start..key_end]) && value_end > value_start {
            out.push_str(&text[copied..value_start]);
            out.push_str(HIDDEN);
            copied = value_end;
        }
        at = value_end.max(eq + 1);
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifying_values_are_hidden_wherever_they_stand_and_the_rest_stays() {
        let mut value = json!({
            "verdict": "p99 ttft x3 on tenant=globex & model=llama-3 (session.id=s-42), worker-03",
            "root_causes": [{
                "dimensions": {"tenant": "globex", "kv_cache_policy": "paged", "Session.Id": "s-1"},
                "evidence": ["tenant_id=42;model_version=r2", "retenant=kept x=1"],
                "score": 3.5,
            }],
            "log_evidence": [{"template": "prompt: tell alice <*> about", "lift": 9.0}],
            "signals": [{"subject": {"worker": "worker-03"}, "detail": "user.email=a@b.c rose"}],
            "session_id": ["s-1", "s-2"],
        });
        hide_personal(&mut value);
        assert_eq!(
            value["verdict"],
            "p99 ttft x3 on tenant=<hidden> & model=llama-3 (session.id=<hidden>), worker-03"
        );
        let cause = &value["root_causes"][0];
        assert_eq!(cause["dimensions"]["tenant"], HIDDEN);
        assert_eq!(cause["dimensions"]["Session.Id"], HIDDEN);
        assert_eq!(cause["dimensions"]["kv_cache_policy"], "paged");
        assert_eq!(cause["evidence"][0], "tenant_id=<hidden>;model_version=r2");
        // a key that only ends like a personal one is not one
        assert_eq!(cause["evidence"][1], "retenant=kept x=1");
        assert_eq!(cause["score"], 3.5);
        assert_eq!(value["log_evidence"][0]["template"], "prompt: <cut>");
        assert_eq!(value["signals"][0]["subject"]["worker"], "worker-03");
        assert_eq!(value["signals"][0]["detail"], "user.email=<hidden> rose");
        assert_eq!(value["session_id"], json!([HIDDEN, HIDDEN]));
    }

    #[test]
    fn text_without_personal_pairs_is_unchanged() {
        for text in [
            "",
            "=",
            "tenant=",
            "a=b & c=d",
            "model=llama-3.1-8b-instruct & lora_adapters=chat-lora,sql-lora",
            "ünïcode=ß tenant",
        ] {
            assert_eq!(hide_pairs(text), text);
        }
        assert_eq!(hide_pairs("TENANT=Acme"), "TENANT=<hidden>");
        assert_eq!(
            hide_pairs("WHERE tenant = 'globex inc' AND session_id != \"s 1\" AND model = 'm'"),
            "WHERE tenant = <hidden> AND session_id != <hidden> AND model = 'm'"
        );
        assert_eq!(hide_pairs("trace_id=ab12 ünï"), "trace_id=<hidden> ünï");
    }
}
