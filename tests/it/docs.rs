//! The README and docs/*.md stay true to the code: the README's flags table is clap's flags
//! (names and defaults), every relative link and `#anchor` in the README and docs/*.md leads to a
//! file and a heading that exist (GitHub's anchor rules), and the runbook opens with a severity
//! table of every alert in the rendered rules, then has one section per alert, critical first,
//! the first within its first 100 lines. The README is the front door: at most 20 KB, its two
//! commands first, and it states the HTTP server's limits as the code has them. Every key of
//! `config.example.toml` is in docs/configuration.md.

use crate::common;

use clap::CommandFactory;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and every docs/*.md.
fn doc_files() -> Vec<PathBuf> {
    let root = common::repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of a markdown text outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor of a heading's text: lower case, inline-code backticks and punctuation
/// dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings, with GitHub's `-1`, `-2` for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of inline links `[text](target)` in a line, outside inline code.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].trim().to_owned());
                    i += end + 2;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn every_relative_link_and_anchor_exists() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = read(&file);
        let dir = file.parent().unwrap();
        for line in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let name = format!("{}: ({target})", file.display());
                if !linked.exists() {
                    broken.push(format!("{name}: no file {}", linked.display()));
                } else if !anchor.is_empty() {
                    let is_md = linked.extension().is_some_and(|e| e == "md");
                    if !is_md || !anchors(&read(&linked)).contains(anchor) {
                        broken.push(format!("{name}: no heading #{anchor}"));
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

fn anchors_follow_github_rules() {
    let text = "# A\n## Targets (`src/probe/target/`)\n## How close am I to my disk's cap?\n## A\n```\n# not a heading\n```\n";
    let got = anchors(text);
    let want: BTreeSet<String> = [
        "a",
        "targets-srcprobetarget",
        "how-close-am-i-to-my-disks-cap",
        "a-1",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        link_targets("see [x](a.md#b) and `[y](c.md)`, [z](#d)"),
        ["a.md#b", "#d"]
    );
}

/// The rows of the README's flags table: flag name (without `=VALUE`) and default column.
fn readme_flags(readme: &str) -> BTreeMap<String, String> {
    let start = readme
        .find("\n## Flags\n")
        .expect("README has a Flags section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut out = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `--")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for flag in cells[1].split(", ") {
            let name = flag.trim_matches('`');
            let name = name.split('=').next().unwrap().to_owned();
            out.insert(name, cells[2].to_owned());
        }
    }
    out
}

fn the_readme_flags_table_is_clap_s() {
    let readme = read(&common::repo_root().join("README.md"));
    let table = readme_flags(&readme);
    let command = diskprobe_exporter::cli::Cli::command();
    let mut clap_flags = BTreeSet::from(["--help".to_owned(), "--version".to_owned()]);
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if arg.is_hide_set() {
            continue;
        }
        let name = format!("--{long}");
        let row = table
            .get(&name)
            .unwrap_or_else(|| panic!("README's flags table has no row for {name}"));
        for default in arg.get_default_values() {
            let default = default.to_string_lossy();
            assert!(
                row.contains(&format!("`{default}`")) || row == &default,
                "README: {name} defaults to {default:?}, the table says {row:?}"
            );
        }
        clap_flags.insert(name);
    }
    let documented: BTreeSet<String> = table.keys().cloned().collect();
    let unknown: Vec<&String> = documented.difference(&clap_flags).collect();
    assert!(
        unknown.is_empty(),
        "README documents flags clap does not have: {unknown:?}"
    );
}

fn the_readme_is_a_front_door() {
    let readme = read(&common::repo_root().join("README.md"));
    assert!(
        readme.len() <= 20 * 1024,
        "README.md is {} bytes",
        readme.len()
    );
    let first_block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("README opens with a sh block");
    assert!(
        readme.find("```sh\n") < readme.find("\n## "),
        "the commands come first"
    );
    for command in [
        "cargo run --release --locked -- --web.listen-address=localhost:9957",
        "cargo test --locked",
    ] {
        assert!(
            first_block.contains(command),
            "README's first block lacks {command:?}"
        );
    }
    for doc in doc_files().iter().skip(1) {
        let name = format!("(docs/{})", doc.file_name().unwrap().to_string_lossy());
        assert!(readme.contains(&name), "README does not link {name}");
    }
}

fn the_readme_states_the_http_limits_the_server_has() {
    use diskprobe_exporter::server;
    let readme = read(&common::repo_root().join("README.md"));
    // Line breaks fall anywhere in prose: compare with whitespace collapsed.
    let text = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let s = |d: std::time::Duration| format!("{} s", d.as_secs());
    let grace = format!("{} s", server::connection_slots::GRACE.as_secs_f64());
    for fact in [
        format!(
            "Request headers must arrive within {} and fit in {} KiB and at most {} header lines (431 otherwise)",
            s(server::HEADER_READ_TIMEOUT),
            server::MAX_HEADER_BYTES / 1024,
            server::MAX_HEADERS
        ),
        format!(
            "an answer the client takes none of for {}",
            s(server::WRITE_STALL_TIMEOUT)
        ),
        format!(
            "a connection that moves no byte for {}",
            s(server::IDLE_TIMEOUT)
        ),
        format!(
            "a TLS handshake must end within {}",
            s(server::TLS_HANDSHAKE_TIMEOUT)
        ),
        format!(
            "A connection beyond the limit waits in the listen backlog ({} connections)",
            diskprobe_exporter::agent::LISTEN_BACKLOG
        ),
        format!(
            "one that has had no request allowed (not authenticated, or no request yet) within {grace} of being accepted"
        ),
        format!("else one that had a request allowed and has moved no byte for {grace}"),
    ] {
        assert!(text.contains(&fact), "README does not say: {fact}");
    }
}

/// Alert names and severities in the rendered rules, in order.
fn alerts() -> Vec<(String, String)> {
    let rules = read(&common::repo_root().join("deploy/prometheus/rules.yml"));
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rules).expect("rules.yml");
    rules["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules"))
        .filter_map(|r| {
            let alert = r["alert"].as_str()?;
            let severity = r["labels"]["severity"].as_str().expect("a severity");
            Some((alert.to_owned(), severity.to_owned()))
        })
        .collect()
}

fn rank(severity: &str) -> usize {
    ["critical", "warning", "info"]
        .iter()
        .position(|s| *s == severity)
        .unwrap_or_else(|| panic!("unknown severity {severity}"))
}

fn the_runbook_has_a_severity_table_and_a_section_per_alert_critical_first() {
    let runbook = read(&common::repo_root().join("docs/runbook.md"));
    let alerts = alerts();
    assert!(alerts.len() >= 14, "{alerts:?}");
    let severity: BTreeMap<&str, &str> = alerts
        .iter()
        .map(|(a, s)| (a.as_str(), s.as_str()))
        .collect();
    for (alert, sev) in &alerts {
        let row = format!("| [{alert}](#{}) | `{sev}` | ", alert.to_lowercase());
        assert!(
            runbook.contains(&row),
            "runbook's severity table: no row {row:?}"
        );
    }
    // Sections in the runbook's order: every alert once, critical, then warning, then info.
    let sections: Vec<(usize, &str)> = runbook
        .lines()
        .enumerate()
        .filter_map(|(n, l)| l.strip_prefix("## ").map(|h| (n + 1, h.trim())))
        .filter(|(_, h)| h.starts_with("Diskprobe"))
        .collect();
    let named: BTreeSet<&str> = sections.iter().map(|(_, h)| *h).collect();
    let rendered: BTreeSet<&str> = severity.keys().copied().collect();
    assert_eq!(
        named, rendered,
        "runbook sections against the rendered alerts"
    );
    assert_eq!(named.len(), sections.len(), "an alert has two sections");
    let first = sections.first().expect("alert sections").0;
    assert!(
        first <= 100,
        "the first alert section starts at line {first}"
    );
    let ranks: Vec<usize> = sections.iter().map(|(_, h)| rank(severity[h])).collect();
    assert!(
        ranks.windows(2).all(|w| w[0] <= w[1]),
        "runbook sections not critical first: {sections:?}"
    );
    for (line, alert) in &sections {
        let start = runbook.find(&format!("\n## {alert}\n")).unwrap() + 1;
        let section = &runbook[start..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
        for part in [
            "**Means**",
            "**First queries**",
            "**Do**",
            "**Fires with it**",
            "**Silence or escalate**",
        ] {
            assert!(section.contains(part), "{alert} (line {line}): no {part}");
        }
        let queries: Vec<&str> = section
            .split("```promql\n")
            .nth(1)
            .expect("queries")
            .lines()
            .take_while(|l| !l.starts_with("```"))
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(2)
            .collect();
        assert!(
            queries.iter().all(|q| q.contains("cluster=\"$cluster\"")),
            "{alert}: its first queries do not select the cluster: {queries:?}"
        );
        assert!(section.lines().count() <= 60, "{alert}: more than a page");
    }
}

/// Every key `config.example.toml` shows (set or commented out) is in docs/configuration.md's
/// reference.
fn every_key_of_the_example_configuration_is_in_configuration_md() {
    let root = common::repo_root();
    let example = read(&root.join("config.example.toml"));
    let docs = read(&root.join("docs/configuration.md"));
    let keys: BTreeSet<&str> = example
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim()))
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    assert!(keys.len() >= 40, "{keys:?}");
    let missing: Vec<&&str> = keys
        .iter()
        .filter(|k| !docs.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks {missing:?}"
    );
}

crate::tests! {
    every_relative_link_and_anchor_exists,
    anchors_follow_github_rules,
    the_readme_flags_table_is_clap_s,
    the_readme_is_a_front_door,
    the_readme_states_the_http_limits_the_server_has,
    the_runbook_has_a_severity_table_and_a_section_per_alert_critical_first,
    every_key_of_the_example_configuration_is_in_configuration_md,
}
