//! Every window of the bundled rules holds enough samples on every engine: each range of a
//! `rate`, `increase`, `delta` or `*_over_time` aggregation in `deploy/prometheus/rules.yml`
//! holds at least [`MIN_SAMPLES`] samples on an engine whose ranges leave out a sample on their
//! left edge (Prometheus 3; 2.x holds one more), at a 1-minute scrape for a scraped series and at
//! its rule group's interval for a recorded one; a subquery at its step. A window of 2 minutes
//! over 1-minute scrapes holds 2 samples on Prometheus 3: one missed scrape and a rate is gone,
//! and an alert's `for` starts over. Lookups are exempt: `last_over_time` and
//! `present_over_time` (the latest sample of a recording, or whether there is one).

use crate::common;

use promql_parser::parser::Expr;
use serde_yaml_ng::Value;
use std::collections::HashMap;
use std::time::Duration;

/// The fewest samples a checked range may hold.
const MIN_SAMPLES: u64 = 4;

/// The scrape interval the windows are checked at: a Prometheus server's default.
const SCRAPE: Duration = Duration::from_secs(60);

/// The interval of a group that sets none: the default `evaluation_interval` (1 minute).
const DEFAULT_GROUP_INTERVAL: Duration = Duration::from_secs(60);

/// Functions whose range is not checked: they look up one sample.
const LOOKUPS: &[&str] = &["last_over_time", "present_over_time"];

/// Whether `function` aggregates the samples of its range (and so is checked).
fn aggregates_a_range(function: &str) -> bool {
    !LOOKUPS.contains(&function)
        && ([
            "rate", "increase", "delta", "irate", "idelta", "deriv", "resets", "changes",
        ]
        .contains(&function)
            || function.ends_with("_over_time"))
}

/// A Prometheus duration (`5m`, `1h30m`, `2d`), as promql-parser reads one.
pub(crate) fn duration(text: &str) -> Duration {
    promql_parser::util::parse_duration(text).unwrap_or_else(|e| panic!("duration {text:?}: {e}"))
}

/// One rule: its group's name and interval, its name, its expression.
pub(crate) struct Rule {
    pub(crate) group: String,
    pub(crate) interval: Duration,
    pub(crate) name: String,
    pub(crate) expr: String,
}

impl Rule {
    /// Its expression, parsed.
    pub(crate) fn ast(&self) -> Expr {
        promql_parser::parser::parse(&self.expr).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }
}

/// The rules of a rule file, in file order.
pub(crate) fn rules(doc: &Value) -> Vec<Rule> {
    let groups = doc["groups"].as_sequence().expect("groups");
    groups
        .iter()
        .flat_map(|g| {
            let interval = g["interval"]
                .as_str()
                .map_or(DEFAULT_GROUP_INTERVAL, duration);
            let group = g["name"].as_str().expect("group name").to_owned();
            g["rules"]
                .as_sequence()
                .expect("rules")
                .iter()
                .map(move |r| Rule {
                    group: group.clone(),
                    interval,
                    name: r["record"]
                        .as_str()
                        .or(r["alert"].as_str())
                        .expect("record or alert")
                        .to_owned(),
                    expr: r["expr"].as_str().expect("expr").to_owned(),
                })
        })
        .collect()
}

/// How often a series has a sample: a recorded one (a name with a colon) at the interval of the
/// group that records it, a scraped one at [`SCRAPE`].
fn sample_interval(name: &str, recorded: &HashMap<String, Duration>) -> Duration {
    if name.contains(':') {
        *recorded
            .get(name)
            .unwrap_or_else(|| panic!("{name} is read but no rule records it"))
    } else {
        SCRAPE
    }
}

/// Samples a left-open range of `range` holds of a series sampled every `every`.
fn samples(range: Duration, every: Duration) -> u64 {
    (range.as_millis() / every.as_millis()) as u64
}

/// Walks one rule's expression ([`promql_parser::util::walk_expr`]): at each checked function,
/// the samples its range (or subquery) holds.
struct Windows<'a> {
    rule: &'a Rule,
    recorded: &'a HashMap<String, Duration>,
    problems: &'a mut Vec<String>,
}

impl promql_parser::util::ExprVisitor for Windows<'_> {
    type Error = std::convert::Infallible;

    fn pre_visit(&mut self, e: &Expr) -> Result<bool, Self::Error> {
        let Expr::Call(call) = e else {
            return Ok(true);
        };
        if !aggregates_a_range(call.func.name) {
            return Ok(true);
        }
        let (what, range, every) = match call.args.args.last().map(|a| a.as_ref()) {
            Some(Expr::MatrixSelector(ms)) => {
                let name = ms.vs.name.as_deref().unwrap_or("");
                (
                    name.to_owned(),
                    ms.range,
                    sample_interval(name, self.recorded),
                )
            }
            Some(Expr::Subquery(sq)) => (
                "subquery".to_owned(),
                sq.range,
                sq.step.unwrap_or(self.rule.interval),
            ),
            _ => return Ok(true),
        };
        let n = samples(range, every);
        if n < MIN_SAMPLES {
            self.problems.push(format!(
                "{}: {}({what}[{range:?}]) holds {n} samples (one every {every:?})",
                self.rule.name, call.func.name
            ));
        }
        Ok(true)
    }
}

/// Every checked range of every rule in `doc` that holds fewer than [`MIN_SAMPLES`] samples, as
/// "rule: function(selector[range]) holds N samples (one every I)".
fn short_windows(doc: &Value) -> Vec<String> {
    let rules = rules(doc);
    let recorded: HashMap<String, Duration> = rules
        .iter()
        .filter(|r| r.name.contains(':'))
        .map(|r| (r.name.clone(), r.interval))
        .collect();
    let mut problems = Vec::new();
    for rule in &rules {
        let mut windows = Windows {
            rule,
            recorded: &recorded,
            problems: &mut problems,
        };
        let Ok(_) = promql_parser::util::walk_expr(&mut windows, &rule.ast());
    }
    problems
}

/// The bundled `deploy/prometheus/rules.yml`, parsed.
pub(crate) fn bundled_rules() -> Value {
    let text = std::fs::read_to_string(common::repo_root().join("deploy/prometheus/rules.yml"))
        .expect("rules.yml");
    serde_yaml_ng::from_str(&text).expect("rules.yml")
}

/// The bundled rules' windows each hold at least 4 samples at a 1-minute scrape and at their
/// groups' intervals on a left-open engine.
fn every_window_holds_four_samples_on_every_engine() {
    let problems = short_windows(&bundled_rules());
    assert!(
        problems.is_empty(),
        "windows that hold fewer than {MIN_SAMPLES} samples on Prometheus 3 at a 1-minute scrape:\n{}",
        problems.join("\n")
    );
}

/// The check finds what it is for: a 2-minute rate of a scraped counter (2 samples), a 10-minute
/// quantile of a recording of an hourly group (0) and a subquery of 3 steps, and passes a
/// 4-minute rate and a lookup of an hourly recording over 10 minutes.
fn the_window_check_finds_short_windows() {
    let doc: Value = serde_yaml_ng::from_str(
        r#"
groups:
  - name: hourly
    interval: 1h
    rules:
      - record: job:x:median_1h
        expr: quantile_over_time(0.5, x[1h])
  - name: fast
    rules:
      - record: job:x:rate2m
        expr: sum(rate(x_total[2m]))
      - record: job:x:rate4m
        expr: sum(rate(x_total[4m]))
      - record: job:x:q
        expr: quantile_over_time(0.5, job:x:median_1h[10m])
      - record: job:x:last
        expr: last_over_time(job:x:median_1h[10m])
      - record: job:x:sub
        expr: max_over_time(rate(x_total[5m])[3m:1m])
"#,
    )
    .unwrap();
    let problems = short_windows(&doc);
    let named: Vec<&str> = problems
        .iter()
        .map(|p| p.split(": ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        named,
        ["job:x:rate2m", "job:x:q", "job:x:sub"],
        "{problems:#?}"
    );
    assert!(problems[0].contains("holds 2 samples"), "{problems:#?}");
    assert!(problems[1].contains("holds 0 samples"), "{problems:#?}");
    assert!(problems[2].contains("holds 3 samples"), "{problems:#?}");
}

crate::tests! {
    every_window_holds_four_samples_on_every_engine,
    the_window_check_finds_short_windows,
}
