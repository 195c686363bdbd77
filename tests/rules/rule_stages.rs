//! The bundled rules mean the same whatever order and phase their groups run in: no rule reads a
//! series recorded in its own group, and every read of a series recorded by another group holds
//! that group's last evaluation, wherever in its interval the reader runs.
//!
//! vmalert stores the results of a group's rules after the group has run (its documentation,
//! "Limitations": chained recording rules in one group read the previous evaluation or nothing),
//! and both Prometheus and vmalert run groups independently, each at its own phase. So a stage
//! of a chain is a group of its own, and its reader reads it either through an instant selector,
//! when the producer's interval is at most the engines' default look-back (5 minutes: Prometheus'
//! `--query.lookback-delta`, vmalert's `-datasource.queryStep`), or through a range of at least
//! two of the producer's intervals (one for a range set back by an `offset`, a check that history
//! reaches back that far: a phase moves which evaluation falls in it, not whether one does).
//! No rule reads a series recorded by a group below its own in the file either: vmalert's replay
//! (`-replay.timeFrom`, how a range of history is evaluated on VictoriaMetrics, and how the fleet
//! weeks run there, tests/rules/prometheus_rules.rs) evaluates one group over the whole range before
//! the next, so a later group's recordings do not exist yet when an earlier one reads them. And
//! the groups fit the limits of Mimir's ruler by default.

use crate::rule_windows::{Rule, bundled_rules, rules};

use promql_parser::parser::Expr;
use serde_yaml_ng::Value;
use std::collections::HashMap;
use std::time::Duration;

/// The look-back of an instant selector on Prometheus and vmalert by default.
const LOOKBACK: Duration = Duration::from_secs(300);

/// Where each recorded name is recorded: its group and that group's interval.
fn producers(rules: &[Rule]) -> HashMap<&str, (&str, Duration)> {
    rules
        .iter()
        .filter(|r| r.name.contains(':'))
        .map(|r| (r.name.as_str(), (r.group.as_str(), r.interval)))
        .collect()
}

/// Each group's place in the file.
fn group_order(doc: &Value) -> HashMap<String, usize> {
    doc["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .enumerate()
        .map(|(i, g)| (g["name"].as_str().expect("group name").to_owned(), i))
        .collect()
}

/// Walks one rule's expression: at each selector of a recorded name, whether the read holds the
/// producer's last evaluation.
struct Reads<'a> {
    rule: &'a Rule,
    producers: &'a HashMap<&'a str, (&'a str, Duration)>,
    order: &'a HashMap<String, usize>,
    problems: &'a mut Vec<String>,
}

impl Reads<'_> {
    fn check(&mut self, name: &str, range: Option<Duration>, offset: bool) {
        let Some(&(group, every)) = self.producers.get(name) else {
            return;
        };
        let rule = &self.rule.name;
        if group == self.rule.group {
            self.problems.push(format!(
                "{rule}: reads {name}, recorded in its own group {group}"
            ));
            return;
        }
        if self.order[group] > self.order[&self.rule.group] {
            self.problems.push(format!(
                "{rule}: reads {name}, recorded by {group}, a group below its own"
            ));
        }
        match range {
            None if every > LOOKBACK => self.problems.push(format!(
                "{rule}: reads {name} (every {every:?}) by an instant selector, which looks back {LOOKBACK:?}"
            )),
            Some(range) if range < every * if offset { 1 } else { 2 } => {
                self.problems.push(format!(
                    "{rule}: reads {name} (every {every:?}) through [{range:?}]{}",
                    if offset { " offset" } else { "" }
                ))
            }
            _ => {}
        }
    }
}

impl promql_parser::util::ExprVisitor for Reads<'_> {
    type Error = std::convert::Infallible;

    fn pre_visit(&mut self, e: &Expr) -> Result<bool, Self::Error> {
        match e {
            Expr::VectorSelector(vs) => {
                self.check(vs.name.as_deref().unwrap_or(""), None, vs.offset.is_some())
            }
            Expr::MatrixSelector(ms) => self.check(
                ms.vs.name.as_deref().unwrap_or(""),
                Some(ms.range),
                ms.vs.offset.is_some(),
            ),
            _ => {}
        }
        Ok(true)
    }
}

/// Every read in `doc` that depends on the order or phase of its groups, as
/// "rule: reads NAME ...".
fn order_dependent_reads(doc: &Value) -> Vec<String> {
    let rules = rules(doc);
    let producers = producers(&rules);
    let order = group_order(doc);
    let mut problems = Vec::new();
    for rule in &rules {
        let mut reads = Reads {
            rule,
            producers: &producers,
            order: &order,
            problems: &mut problems,
        };
        let Ok(_) = promql_parser::util::walk_expr(&mut reads, &rule.ast());
    }
    problems
}

/// The bundled rules: no read within a group or of a group below, every read across groups holds
/// the producer's last evaluation.
fn no_rule_depends_on_the_order_of_evaluation() {
    let problems = order_dependent_reads(&bundled_rules());
    assert!(
        problems.is_empty(),
        "reads that depend on the order or phase of rule groups (docs/rules-design.md, \"Stages\"):\n{}",
        problems.join("\n")
    );
}

/// Mimir's ruler refuses a group of more than 20 rules and a tenant of more than 70 groups by
/// default (`ruler_max_rules_per_rule_group`, `ruler_max_rule_groups_per_tenant`): the bundled
/// rules load there unchanged.
fn the_groups_fit_mimirs_default_limits() {
    let doc = bundled_rules();
    let groups = doc["groups"].as_sequence().expect("groups");
    assert!(groups.len() <= 70, "{} groups", groups.len());
    for g in groups {
        let n = g["rules"].as_sequence().expect("rules").len();
        assert!(n <= 20, "group {:?} has {n} rules", g["name"]);
    }
}

/// The check finds what it is for: a read within a group, an instant read of a 30-minute group,
/// a one-interval lookup of an hourly one, a read of a group below; it passes an instant read of a 5-minute group, a
/// two-interval lookup and an offset history check of one interval.
fn the_order_check_finds_chained_reads() {
    let doc: Value = serde_yaml_ng::from_str(
        r#"
groups:
  - name: sample
    interval: 5m
    rules:
      - record: job:x:last
        expr: max(x)
      - record: job:x:chained
        expr: job:x:last * 2
  - name: score
    interval: 30m
    rules:
      - record: job:x:median_12h
        expr: quantile_over_time(0.5, job:x:last[12h])
  - name: hourly
    interval: 1h
    rules:
      - record: job:x:median_1h
        expr: quantile_over_time(0.5, job:x:last[1h])
  - name: readers
    rules:
      - record: job:x:instant_score
        expr: job:x:median_12h > 2
      - record: job:x:lookup_1h
        expr: last_over_time(job:x:median_1h[1h])
      - record: job:x:from_below
        expr: last_over_time(job:x:below[10m])
      - record: job:x:fine
        expr: job:x:last / last_over_time(job:x:median_12h[1h]) and last_over_time(job:x:median_1h[1h] offset 20h)
  - name: below
    interval: 5m
    rules:
      - record: job:x:below
        expr: job:x:last * 3
"#,
    )
    .unwrap();
    let problems = order_dependent_reads(&doc);
    let named: Vec<&str> = problems
        .iter()
        .map(|p| p.split(": ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        named,
        [
            "job:x:chained",
            "job:x:instant_score",
            "job:x:lookup_1h",
            "job:x:from_below"
        ],
        "{problems:#?}"
    );
    assert!(
        problems[0].contains("its own group sample"),
        "{problems:#?}"
    );
    assert!(
        problems[3].contains("a group below its own"),
        "{problems:#?}"
    );
}

crate::tests! {
    no_rule_depends_on_the_order_of_evaluation,
    the_groups_fit_mimirs_default_limits,
    the_order_check_finds_chained_reads,
}
