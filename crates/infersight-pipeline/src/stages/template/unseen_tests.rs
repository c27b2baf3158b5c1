//! Tests of template mining on log families the miner was not tuned on: seeded synthetic lines in
//! the shapes of proxy connection logs, cloud API logs, kernel and hardware logs, OS event logs and
//! desktop OS daemon logs (written for these tests, not taken from any data set). Each family
//! carries one class of failure seen on unseen systems: parameters written as several tokens
//! (`0 bytes` vs `1024 bytes (1.0 KB)`, `<1 sec` vs `00:01`), host names and `host:port`, MAC
//! addresses, Windows paths, and parameters over-split into one template per value.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// xorshift64*: a seeded generator, so every run mines the same lines.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
    fn hex(&mut self, digits: usize) -> String {
        (0..digits)
            .map(|_| char::from(b"0123456789abcdef"[self.below(16) as usize]))
            .collect()
    }
    fn uuid(&mut self) -> String {
        format!(
            "{}-{}-{}-{}-{}",
            self.hex(8),
            self.hex(4),
            self.hex(4),
            self.hex(4),
            self.hex(12)
        )
    }
    fn ip(&mut self) -> String {
        format!(
            "10.{}.{}.{}",
            self.below(256),
            self.below(256),
            1 + self.below(254)
        )
    }
}

/// Lines of several events, each line tagged with its event.
struct Family {
    lines: Vec<String>,
    events: Vec<&'static str>,
}

impl Family {
    fn new() -> Self {
        Family {
            lines: Vec::new(),
            events: Vec::new(),
        }
    }
    fn push(&mut self, event: &'static str, line: String) {
        self.events.push(event);
        self.lines.push(line);
    }

    /// Mines the lines as message contents (no header) with the default configuration and returns,
    /// per event, the templates its lines got.
    fn mine(&self) -> BTreeMap<&'static str, BTreeSet<String>> {
        let format = LogFormat::parse("<Content>").unwrap();
        let mined = mine_lines(
            self.lines.iter().map(String::as_str),
            &MinerConfig::default(),
            Some(&format),
        );
        let mut templates: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
        for (event, line) in self.events.iter().zip(&mined) {
            templates
                .entry(event)
                .or_default()
                .insert(line.template.clone());
        }
        // No template is shared by two events.
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (event, set) in &templates {
            for template in set {
                if let Some(other) = owner.insert(template, event) {
                    panic!("events {other} and {event} share the template `{template}`");
                }
            }
        }
        templates
    }
}

/// Every event got exactly one template, the expected text.
fn assert_templates(mined: &BTreeMap<&'static str, BTreeSet<String>>, expected: &[(&str, &str)]) {
    for (event, template) in expected {
        let got = &mined[event];
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            vec![template],
            "event {event}: {} templates",
            got.len()
        );
    }
}

const HOST_WORDS: &[&str] = &[
    "www", "api", "mail", "cdn", "static", "push", "login", "img", "update", "search",
];
const DOMAINS: &[&str] = &[
    "example.com",
    "example.net",
    "sample.org",
    "cs.univ.edu",
    "news.example.co.uk",
    "shop.example.de",
];

fn host(rng: &mut Rng) -> String {
    format!("{}.{}", rng.pick(HOST_WORDS), rng.pick(DOMAINS))
}

/// A byte count as proxies print it: bare below 1 KB, with its conversion above.
fn bytes(rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => "0 bytes".to_string(),
        1 => format!("{} bytes", 1 + rng.below(1000)),
        _ => {
            let count = 1024 + rng.below(4_000_000);
            if count < 1 << 20 {
                format!("{count} bytes ({:.1} KB)", count as f64 / 1024.0)
            } else {
                format!("{count} bytes ({:.2} MB)", count as f64 / 1048576.0)
            }
        }
    }
}

/// A connection lifetime: `<1 sec`, `mm:ss` or `hh:mm:ss`.
fn lifetime(rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => "<1 sec".to_string(),
        1 => format!("00:{:02}", 1 + rng.below(59)),
        _ => format!(
            "{:02}:{:02}:{:02}",
            rng.below(3),
            rng.below(60),
            rng.below(60)
        ),
    }
}

#[test]
fn proxy_connection_logs_group_by_event_whatever_the_form_of_sizes_and_lifetimes() {
    for seed in 1..=3 {
        let mut rng = Rng::new(seed);
        let mut family = Family::new();
        let proxy = format!("proxy.{}:{}", rng.pick(DOMAINS), 3128 + rng.below(3000));
        for _ in 0..600 {
            let target = format!("{}:{}", host(&mut rng), rng.pick(&["80", "443", "8080"]));
            match rng.below(10) {
                0..=2 => family.push("open", format!("{target} open through proxy {proxy} HTTPS")),
                3..=8 => family.push(
                    "close",
                    format!(
                        "{target} close, {} sent, {} received, lifetime {}",
                        bytes(&mut rng),
                        bytes(&mut rng),
                        lifetime(&mut rng)
                    ),
                ),
                _ => family.push(
                    "error",
                    format!(
                        "{target} error : Could not connect through proxy {proxy} - Proxy server \
                         cannot establish a connection with the target, status code {}",
                        rng.pick(&["403", "404", "502"])
                    ),
                ),
            }
        }
        let mined = family.mine();
        assert_templates(
            &mined,
            &[
                ("open", "<*> open through proxy <*> HTTPS"),
                ("close", "<*> close, <*> sent, <*> received, lifetime <*>"),
                (
                    "error",
                    "<*> error : Could not connect through proxy <*> - Proxy server cannot \
                     establish a connection with the target, status code <*>",
                ),
            ],
        );
    }
}

#[test]
fn cloud_api_logs_mask_host_names_request_ids_and_key_values() {
    for seed in 1..=3 {
        let mut rng = Rng::new(seed);
        let mut family = Family::new();
        // Compute nodes: a handful of host names, each frequent (a split candidate by count).
        let nodes: Vec<String> = (0..3)
            .map(|n| format!("compute-{n}.rack{}.dc1.cloud.example.net", rng.below(9)))
            .collect();
        for _ in 0..600 {
            let node = &nodes[rng.below(3) as usize];
            match rng.below(5) {
                0 => family.push(
                    "request",
                    format!(
                        "request_id=req-{} tenant={} client={}:{} method=GET path=/v1/{}/volumes/{} \
                         status=200 len={} time={:.4}",
                        rng.uuid(),
                        rng.hex(32),
                        rng.ip(),
                        1024 + rng.below(60000),
                        rng.hex(32),
                        rng.uuid(),
                        rng.below(5000),
                        rng.below(10_000) as f64 / 7919.0
                    ),
                ),
                1 => family.push(
                    "audit",
                    format!("Auditing locally available compute resources for node {node}"),
                ),
                2 => family.push(
                    "claim",
                    format!(
                        "[instance: {}] Claim successful on node {node}",
                        rng.uuid()
                    ),
                ),
                3 => family.push(
                    "spawn",
                    format!(
                        "[instance: {}] Took {}.{:02} seconds to build instance.",
                        rng.uuid(),
                        rng.below(60),
                        rng.below(100)
                    ),
                ),
                _ => family.push(
                    "view",
                    format!(
                        "Final resource view: name={node} phys_ram={}MB used_ram={}MB \
                         total_vcpus={} used_vcpus={} pci_stats=[]",
                        1 << (14 + rng.below(3)),
                        512 * rng.below(64),
                        16,
                        rng.below(16)
                    ),
                ),
            }
        }
        let mined = family.mine();
        assert_templates(
            &mined,
            &[
                (
                    "request",
                    "request_id=<*> tenant=<*> client=<*> method=GET path=<*> status=<*> \
                     len=<*> time=<*>",
                ),
                (
                    "audit",
                    "Auditing locally available compute resources for node <*>",
                ),
                ("claim", "[instance: <*>] Claim successful on node <*>"),
                (
                    "spawn",
                    "[instance: <*>] Took <*> seconds to build instance.",
                ),
                (
                    "view",
                    "Final resource view: name=<*> phys_ram=<*> used_ram=<*> total_vcpus=<*> \
                     used_vcpus=<*> pci_stats=[]",
                ),
            ],
        );
    }
}

#[test]
fn kernel_and_hardware_logs_keep_value_lists_mac_addresses_and_interfaces_variable() {
    for seed in 1..=3 {
        let mut rng = Rng::new(seed);
        let mut family = Family::new();
        for _ in 0..600 {
            let interface = rng.pick(&["eth0", "eth1"]);
            match rng.below(4) {
                0 => {
                    let fans: Vec<String> = (0..3 + rng.below(4))
                        .map(|_| (3000 + rng.below(1500)).to_string())
                        .collect();
                    family.push("fans", format!("Fan speeds ( {} )", fans.join(" ")));
                }
                1 => {
                    let mac: Vec<String> = (0..6).map(|_| rng.hex(2)).collect();
                    family.push(
                        "dhcp",
                        format!(
                            "DHCPREQUEST for {} from {} via {interface}",
                            rng.ip(),
                            mac.join(":")
                        ),
                    );
                }
                2 => family.push(
                    "link",
                    format!(
                        "nic_driver: {interface}: watchdog: NIC Link is Up {} Mbps Full Duplex",
                        rng.pick(&["100", "1000"])
                    ),
                ),
                _ => family.push(
                    "temperature",
                    format!(
                        "Temperature ({}C) exceeds warning threshold",
                        35 + rng.below(20)
                    ),
                ),
            }
        }
        let mined = family.mine();
        assert_templates(
            &mined,
            &[
                ("fans", "Fan speeds ( <*> )"),
                ("dhcp", "DHCPREQUEST for <*> from <*> via <*>"),
                (
                    "link",
                    "nic_driver: <*>: watchdog: NIC Link is Up <*> Mbps Full Duplex",
                ),
                ("temperature", "Temperature (<*>) exceeds warning threshold"),
            ],
        );
    }
}

#[test]
fn os_event_logs_mask_windows_paths_and_hresults() {
    let folders = [
        r"C:\Windows\servicing\Packages",
        r"C:\Windows\WinSxS\Manifests",
        r"C:\ProgramData\Microsoft\Windows\Caches",
    ];
    for seed in 1..=3 {
        let mut rng = Rng::new(seed);
        let mut family = Family::new();
        for _ in 0..600 {
            let folder = folders[rng.below(3) as usize];
            match rng.below(3) {
                0 => family.push("scan", format!("Scanning {folder} for pending operations")),
                1 => family.push(
                    "load",
                    format!(
                        "Loaded Servicing Stack v6.{}.{}.{} with Core: {folder}\\cbscore.dll",
                        rng.below(4),
                        7600 + rng.below(2),
                        rng.below(30_000)
                    ),
                ),
                _ => family.push(
                    "fail",
                    format!(
                        "Failed to get next element [HRESULT = 0x{} - E_FAIL]",
                        rng.hex(8)
                    ),
                ),
            }
        }
        let mined = family.mine();
        assert_templates(
            &mined,
            &[
                ("scan", "Scanning <*> for pending operations"),
                ("load", "Loaded Servicing Stack <*> with Core: <*>"),
                (
                    "fail",
                    "Failed to get next element [HRESULT = <*> - E_FAIL]",
                ),
            ],
        );
    }
}

#[test]
fn desktop_daemon_logs_mask_host_ports_and_durations_written_apart() {
    for seed in 1..=3 {
        let mut rng = Rng::new(seed);
        let mut family = Family::new();
        for _ in 0..600 {
            match rng.below(3) {
                0 => family.push(
                    "connect",
                    format!(
                        "Connection to push.example.com:5223 established after {} ms",
                        rng.below(900)
                    ),
                ),
                1 => family.push(
                    "sleep",
                    format!(
                        "Setting sleep timer to {} {} for {}",
                        rng.below(120),
                        rng.pick(&["sec", "seconds", "minutes"]),
                        rng.hex(12)
                    ),
                ),
                _ => family.push(
                    "memory",
                    format!(
                        "Memory pressure: {} pages free ({}.{}%)",
                        rng.below(100_000),
                        rng.below(100),
                        rng.below(10)
                    ),
                ),
            }
        }
        let mined = family.mine();
        assert_templates(
            &mined,
            &[
                ("connect", "Connection to <*> established after <*> ms"),
                ("sleep", "Setting sleep timer to <*> for <*>"),
                ("memory", "Memory pressure: <*> pages free (<*>)"),
            ],
        );
    }
}

#[test]
fn phrases_fold_into_one_token_and_keep_their_parameters() {
    let format = LogFormat::parse("<Content>").unwrap();
    let mut store = TemplateStore::new(MinerConfig::default());
    let lines = [
        "job 7 copied 0 bytes in 12 ms",
        "job 8 copied 1024 bytes (1.0 KB) in 3 ms",
        "job 9 copied 52 bytes in <1 sec",
    ];
    let clusters: Vec<ClusterRef> = lines
        .iter()
        .map(|line| store.mine(line_content(line, Some(&format)), None))
        .collect();
    let miner = store.miner();
    assert_eq!(
        miner.template_id(clusters[0]),
        miner.template_id(clusters[2])
    );
    assert_eq!(
        miner.template_text(clusters[0]),
        "job <*> copied <*> in <*>"
    );
    let params: Vec<String> = miner
        .params(clusters[1], lines[1])
        .into_iter()
        .map(|(value, _)| value)
        .collect();
    assert_eq!(params, ["8", "1024 bytes (1.0 KB)", "3 ms"]);
    // A template whose lines share the phrase's form renders as before, unit kept.
    let mined = mine_lines(
        ["sent 12 bytes to peer", "sent 7 bytes to peer"],
        &MinerConfig::default(),
        Some(&format),
    );
    assert_eq!(mined[0].template, "sent <*> bytes to peer");
    assert_eq!(mined[0].template_id, mined[1].template_id);
}

#[test]
fn folded_templates_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let lines = ["read 12 bytes in 3 ms", "read 9 bytes in 5 ms"];
    let first = {
        let mut store = TemplateStore::open(dir.path(), MinerConfig::default()).unwrap();
        let cluster = store.mine(lines[0], None);
        store.mine(lines[1], None);
        store.save().unwrap();
        store.miner().template_id(cluster).to_string()
    };
    let mut store = TemplateStore::open(dir.path(), MinerConfig::default()).unwrap();
    let cluster = store.mine("read 100 bytes in 7 ms", None);
    assert_eq!(store.miner().template_id(cluster), first);
    assert_eq!(store.list().len(), 1);
    assert_eq!(store.list()[0].template, "read <*> bytes in <*> ms");
}

#[test]
fn typed_masks_for_hosts_macs_windows_paths_and_units() {
    let masked = |token: &str| {
        let mut out = String::new();
        mask_token(token, &mut out);
        out
    };
    assert_eq!(masked("proxy.example.com:5070"), "<*>");
    assert_eq!(masked("localhost:8080"), "<*>");
    assert_eq!(masked("www.example.co.uk"), "<*>");
    assert_eq!(masked("node-7.rack2.dc1.example.net,"), "<*>,");
    assert_eq!(masked("name=cp-1.rack1.example.org"), "name=<*>");
    assert_eq!(masked("00:11:43:e3:ba:c3"), "<*>");
    assert_eq!(masked(r"C:\Windows\System\drivers\x.sys"), "<*>");
    assert_eq!(masked(r"(\\server\share\file)"), "(<*>)");
    assert_eq!(masked("10seconds"), "<*>");
    assert_eq!(masked("fe80::1c2a:3bff:fe4d:5e6f%en0,"), "<*>,");
    assert_eq!(masked("[2001:db8::1]"), "[<*>]");
    assert_eq!(masked("FF:F2:9F:16:E2:23:00:0D"), "<*>");
    assert_eq!(masked("client=10.0.0.1:4242"), "client=<*>");
    // Dotted names that are no hosts stay: packages, classes, files, sentence ends.
    assert_eq!(
        masked("org.apache.hadoop.ipc.Server"),
        "org.apache.hadoop.ipc.Server"
    );
    assert_eq!(masked("com.apple.xpc.launchd"), "com.apple.xpc.launchd");
    assert_eq!(masked("java.io"), "java.io");
    assert_eq!(masked("llm_engine.py"), "llm_engine.py");
    assert_eq!(masked("status:200"), "status:<*>");
    assert_eq!(param_type("proxy.example.com:5070"), ParamType::Host);
}

proptest::proptest! {
    /// Header detection, masking, folding and parameter reading never panic, whatever the bytes
    /// (multi-byte characters next to brackets, colons, pipes and units included).
    #[test]
    fn arbitrary_lines_never_panic(
        lines in proptest::collection::vec("[a-zA-Z0-9 :|\\[\\]().=<>/\\\\%,é漢-]{0,60}", 1..8)
    ) {
        let mut store = TemplateStore::new(MinerConfig::default());
        for line in &lines {
            let content = line_content(line, None);
            let cluster = store.mine(content, None);
            let _ = store.miner().params(cluster, content);
        }
        store.miner_mut().compact();
    }
}
