//! Every vector-matching join of the bundled rules has a "one" side that is unique by
//! construction (docs/rules-design.md, "Joins"). A join whose "one" side holds two series for a
//! match group does not evaluate ("many-to-many matching not allowed", "found duplicate series
//! for the match group"), and then the rule is gone at that evaluation for every node of the
//! fleet, not only for the node that had the odd moment. This is a static check of the rendered
//! rules with promql-parser:
//!
//! - `A op on (L) group_left (G) B` (and `group_right`, with the sides swapped): the "one" side B
//!   is guarded when it is `topk by (L) (1, ...)` or `bottomk by (L) (1, ...)` (at most one series
//!   per match group, with every label of its input, so `G` can be copied), or an aggregation
//!   `by (L)` exactly (then `G` must be empty: the aggregation drops every other label), or a
//!   recording whose every rule is such an aggregation. An aggregation `by (L, G)` is **not**
//!   guarded: it is unique per match group only while `G` is a function of `L`, which a fleet does
//!   not promise (a reload that changes a label, two scrapes, a kernel name on another disk).
//! - `A op on (L) B` one to one: both sides guarded, as above.
//! - `A op ignoring (I) group_left (G) B`: B is `topk without (I) (1, ...)` (or `bottomk`), or
//!   `agg without (W)` with every label of `I` in `W` and none of `G` (a label the series do not
//!   have is written into `W` all the same, so that the guard is visible where it holds).
//! - Guards see through parentheses, functions that keep each series' labels (`clamp_min`,
//!   `abs`, `last_over_time`, ...), comparisons and arithmetic with a scalar, and the left side of
//!   `and` and `unless`; an `or` is guarded when both its sides are. A recording read through a
//!   selector (instantly or over a range) counts only when it is an aggregation `by` exactly the
//!   match labels (or a one-to-one `on` join, whose output has exactly the `on` labels): a
//!   recording made unique by `topk` can hold two series in one look-back window when its choice
//!   changes, so it is guarded again where it is read.
//! - Joins without `on`/`ignoring` match on all labels, on which every operand is unique (one
//!   metric per selector; aggregations and recordings are unique on their labels), and are not
//!   checked.

use crate::common;

use promql_parser::label::{Labels, MatchOp};
use promql_parser::parser::value::ValueType;
use promql_parser::parser::{self, AggregateExpr, BinaryExpr, Expr, LabelModifier};
use promql_parser::parser::{VectorMatchCardinality, VectorSelector};
use std::collections::{BTreeMap, BTreeSet};

/// A recording rule: its expression and the labels it sets.
struct Recording {
    expr: Expr,
    labels: BTreeMap<String, String>,
}

/// The recording rules of a rules file, by the name they record, and every rule's name and
/// expression (alerts and recordings) in file order.
struct Rules {
    recordings: BTreeMap<String, Vec<Recording>>,
    all: Vec<(String, Expr)>,
}

fn load(yaml: &str) -> Rules {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).expect("rules YAML");
    let mut rules = Rules {
        recordings: BTreeMap::new(),
        all: Vec::new(),
    };
    for group in doc["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let text = rule["expr"].as_str().expect("expr");
            let expr = parser::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let name = rule["record"]
                .as_str()
                .or_else(|| rule["alert"].as_str())
                .expect("record or alert")
                .to_owned();
            if rule["record"].is_string() {
                let labels = rule["labels"]
                    .as_mapping()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| {
                        let k = k.as_str().expect("label name").to_owned();
                        (k, v.as_str().expect("label value").to_owned())
                    })
                    .collect();
                rules
                    .recordings
                    .entry(name.clone())
                    .or_default()
                    .push(Recording {
                        expr: expr.clone(),
                        labels,
                    });
            }
            rules.all.push((name, expr));
        }
    }
    rules
}

fn set(labels: &Labels) -> BTreeSet<String> {
    labels.labels.iter().cloned().collect()
}

fn is_vector(e: &Expr) -> bool {
    matches!(e.value_type(), ValueType::Vector | ValueType::Matrix)
}

/// Functions whose output has one series per input series, with its labels.
const LABEL_KEEPING: &[&str] = &[
    "abs",
    "ceil",
    "floor",
    "round",
    "exp",
    "ln",
    "log2",
    "log10",
    "sqrt",
    "sgn",
    "clamp",
    "clamp_min",
    "clamp_max",
    "timestamp",
    "rate",
    "irate",
    "increase",
    "delta",
    "idelta",
    "deriv",
    "last_over_time",
    "min_over_time",
    "max_over_time",
    "avg_over_time",
    "sum_over_time",
    "count_over_time",
    "quantile_over_time",
    "stddev_over_time",
    "present_over_time",
];

/// What a join requires of its "one" side.
#[derive(Clone, Copy)]
enum Need<'a> {
    /// Unique per these labels (`on`), with these labels to copy (`group_left`/`group_right`).
    On(&'a BTreeSet<String>, &'a BTreeSet<String>),
    /// Unique with these labels ignored (`ignoring`), with these labels to copy.
    Ignoring(&'a BTreeSet<String>, &'a BTreeSet<String>),
}

struct Checker<'r> {
    rules: &'r Rules,
}

impl Checker<'_> {
    /// Whether `e` is unique by construction as `need` asks. `use_site` is false where `e` is
    /// read through a recording's selector (topk no longer counts there).
    fn guarded(&self, e: &Expr, need: Need, use_site: bool, depth: usize) -> bool {
        if depth > 32 {
            return false;
        }
        match e {
            Expr::Paren(p) => self.guarded(&p.expr, need, use_site, depth),
            Expr::Call(call) if LABEL_KEEPING.contains(&call.func.name) => call
                .args
                .args
                .iter()
                .find(|a| is_vector(a))
                .is_some_and(|a| self.guarded(a, need, use_site, depth)),
            Expr::MatrixSelector(m) => self.selector(&m.vs, need, depth),
            Expr::Subquery(s) => self.guarded(&s.expr, need, use_site, depth),
            Expr::VectorSelector(vs) => self.selector(vs, need, depth),
            Expr::Aggregate(a) => aggregate(a, need, use_site),
            Expr::Binary(b) => self.binary(b, need, use_site, depth),
            _ => false,
        }
    }

    fn binary(&self, b: &BinaryExpr, need: Need, use_site: bool, depth: usize) -> bool {
        let (lv, rv) = (is_vector(&b.lhs), is_vector(&b.rhs));
        if !(lv && rv) {
            // With a scalar: each series kept (or filtered) with its labels.
            let v = if lv { &b.lhs } else { &b.rhs };
            return self.guarded(v, need, use_site, depth + 1);
        }
        let op = b.op.to_string();
        match op.as_str() {
            "and" | "unless" => self.guarded(&b.lhs, need, use_site, depth + 1),
            "or" => {
                self.guarded(&b.lhs, need, use_site, depth + 1)
                    && self.guarded(&b.rhs, need, use_site, depth + 1)
            }
            _ => {
                let m = b.modifier.as_ref();
                match (m.map(|m| &m.card), m.and_then(|m| m.matching.as_ref())) {
                    // One to one `on (L)`: the output has exactly the labels L.
                    (Some(VectorMatchCardinality::OneToOne), Some(LabelModifier::Include(l))) => {
                        matches!(need, Need::On(want, copy) if copy.is_empty() && *want == set(l))
                    }
                    // group_left: one output series per series of the many side.
                    (Some(VectorMatchCardinality::ManyToOne(_)), _) => {
                        self.guarded(&b.lhs, need, use_site, depth + 1)
                    }
                    (Some(VectorMatchCardinality::OneToMany(_)), _) => {
                        self.guarded(&b.rhs, need, use_site, depth + 1)
                    }
                    _ => false,
                }
            }
        }
    }

    /// A selector is guarded when it reads a recording every rule of which (that its matchers
    /// leave in) is an aggregation `by` the match labels exactly; rule labels count as labels of
    /// the output unless the selector pins them.
    fn selector(&self, vs: &VectorSelector, need: Need, depth: usize) -> bool {
        let Some(name) = &vs.name else { return false };
        let Some(recordings) = self.rules.recordings.get(name) else {
            return false;
        };
        let pinned: BTreeMap<&str, &str> = vs
            .matchers
            .matchers
            .iter()
            .filter(|m| matches!(m.op, MatchOp::Equal))
            .map(|m| (m.name.as_str(), m.value.as_str()))
            .collect();
        let left: Vec<&Recording> = recordings
            .iter()
            .filter(|r| {
                r.labels
                    .iter()
                    .all(|(k, v)| pinned.get(k.as_str()).is_none_or(|p| p == v))
            })
            .collect();
        !left.is_empty()
            && left.iter().all(|r| {
                // Labels the rule sets and the selector does not pin split the match group
                // unless they are match labels.
                let extra: BTreeSet<String> = r
                    .labels
                    .keys()
                    .filter(|k| !pinned.contains_key(k.as_str()))
                    .cloned()
                    .collect();
                match need {
                    Need::On(want, copy) => {
                        let without: BTreeSet<String> = want.difference(&extra).cloned().collect();
                        (left.len() == 1 || extra.is_subset(want))
                            && self.guarded(&r.expr, Need::On(&without, copy), false, depth + 1)
                    }
                    Need::Ignoring(..) => {
                        left.len() == 1 && self.guarded(&r.expr, need, false, depth + 1)
                    }
                }
            })
    }

    /// Every join of `e` whose "one" side is not guarded, as text.
    fn unguarded(&self, e: &Expr, out: &mut Vec<String>) {
        match e {
            Expr::Paren(p) => self.unguarded(&p.expr, out),
            Expr::Unary(u) => self.unguarded(&u.expr, out),
            Expr::Subquery(s) => self.unguarded(&s.expr, out),
            Expr::Aggregate(a) => {
                self.unguarded(&a.expr, out);
                if let Some(p) = &a.param {
                    self.unguarded(p, out);
                }
            }
            Expr::Call(c) => c.args.args.iter().for_each(|a| self.unguarded(a, out)),
            Expr::Binary(b) => {
                self.unguarded(&b.lhs, out);
                self.unguarded(&b.rhs, out);
                if let Some(why) = self.join_problem(b) {
                    out.push(why);
                }
            }
            _ => {}
        }
    }

    /// Why a join is not guarded, if it is a join and is not.
    fn join_problem(&self, b: &BinaryExpr) -> Option<String> {
        if !(is_vector(&b.lhs) && is_vector(&b.rhs)) || b.op.is_set_operator() {
            return None;
        }
        let m = b.modifier.as_ref()?;
        let matching = m.matching.as_ref()?;
        let empty = BTreeSet::new();
        let (ones, copy): (Vec<&Expr>, BTreeSet<String>) = match &m.card {
            VectorMatchCardinality::OneToOne => (vec![&b.lhs, &b.rhs], empty),
            VectorMatchCardinality::ManyToOne(g) => (vec![&b.rhs], set(g)),
            VectorMatchCardinality::OneToMany(g) => (vec![&b.lhs], set(g)),
            VectorMatchCardinality::ManyToMany => return None,
        };
        if matches!(matching, LabelModifier::Exclude(l) if l.labels.is_empty()) {
            return None;
        }
        let labels = set(matching.labels());
        let need = match matching {
            LabelModifier::Include(_) => Need::On(&labels, &copy),
            LabelModifier::Exclude(_) => Need::Ignoring(&labels, &copy),
        };
        let bad: Vec<String> = ones
            .into_iter()
            .filter(|one| !self.guarded(one, need, true, 0))
            .map(|one| one.to_string())
            .collect();
        (!bad.is_empty()).then(|| {
            format!(
                "`{} {} ...`: the one side {} is not unique by construction",
                b.op,
                m,
                bad.join(" and ")
            )
        })
    }
}

/// An aggregation is guarded for `on (L)` when it is `topk/bottomk by (L) (1, ...)` at the use
/// site, or `agg by (L)` with nothing to copy; for `ignoring (I)` when it is
/// `topk/bottomk without (I) (1, ...)` at the use site, or `agg without (W)` with I in W and no
/// copied label in W.
fn aggregate(a: &AggregateExpr, need: Need, use_site: bool) -> bool {
    let op = a.op.to_string();
    let one = a
        .param
        .as_deref()
        .is_some_and(|p| matches!(p, Expr::NumberLiteral(n) if n.val == 1.0));
    let ranked = matches!(op.as_str(), "topk" | "bottomk");
    match (need, a.modifier.as_ref()) {
        (Need::On(want, copy), Some(LabelModifier::Include(by))) => {
            let by = set(by);
            if ranked {
                use_site && one && by == *want
            } else {
                op != "count_values" && copy.is_empty() && by == *want
            }
        }
        (Need::Ignoring(ignored, copy), Some(LabelModifier::Exclude(without))) => {
            let without = set(without);
            if ranked {
                use_site && one && without == *ignored
            } else {
                op != "count_values" && ignored.is_subset(&without) && copy.is_disjoint(&without)
            }
        }
        _ => false,
    }
}

/// Every unguarded join of the rules in `yaml`, by rule.
fn unguarded_joins(yaml: &str) -> Vec<String> {
    let rules = load(yaml);
    let checker = Checker { rules: &rules };
    let mut found = Vec::new();
    for (name, expr) in &rules.all {
        let mut out = Vec::new();
        checker.unguarded(expr, &mut out);
        found.extend(out.into_iter().map(|o| format!("{name}: {o}")));
    }
    found
}

fn shipped_rules() -> String {
    std::fs::read_to_string(common::repo_root().join("deploy/prometheus/rules.yml"))
        .expect("deploy/prometheus/rules.yml")
}

fn every_join_of_the_shipped_rules_is_guarded() {
    let found = unguarded_joins(&shipped_rules());
    assert!(
        found.is_empty(),
        "joins whose one side is not unique by construction (tests/rules/rule_joins.rs says what \
         is):\n{}",
        found.join("\n")
    );
}

/// The shipped rules with a group of two rules added: `test:cohort_by_topk`, a recording made
/// unique per target by `topk`, and `record` with `expr`.
fn with_rule(record: &str, expr: &str) -> String {
    let mut yaml = shipped_rules();
    yaml.push_str(&format!(
        "  - name: test.added\n    rules:\n      - record: test:cohort_by_topk\n        expr: \
         \"topk by (cluster, job, instance, target) (1, diskprobe_target_info)\"\n      \
         - record: {record}\n        expr: {expr:?}\n"
    ));
    yaml
}

fn unguarded_joins_are_reported() {
    // Each of these fails to evaluate when the one side holds two series for a match group.
    let bad = [
        // A raw info series: two scrapes of one target, or a label a reload changed.
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) diskprobe_target_info{job="diskprobe"}"#,
        // By the match labels and the copied ones: unique only while cohort follows target.
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) max by (cluster, job, instance, target, cohort) (diskprobe_target_info{job="diskprobe"})"#,
        // The shape of an `or ignoring` of two sources of a limit.
        r#"diskprobe:disk_workload_iops:rate4m / ignoring (serial, wwn, source) group_left (serial, wwn, source) (diskprobe_disk_limit_iops or ignoring (source) diskprobe:disk_limit_iops:probe)"#,
        // topk over more than one series per group.
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) topk by (cluster, job, instance, target) (2, diskprobe_target_info)"#,
        // topk by other labels than the match labels.
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) topk by (cluster, job, instance) (1, diskprobe_target_info)"#,
        // One to one: both sides must be unique.
        r#"diskprobe:probe_iops:last / on (cluster, job, instance, target, profile) diskprobe_probe_iops"#,
        // Through a recording that is unique by topk: not once read over a range.
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) last_over_time(test:cohort_by_topk[1h])"#,
    ];
    for (i, expr) in bad.iter().enumerate() {
        let found = unguarded_joins(&with_rule(&format!("test:bad_{i}"), expr));
        assert_eq!(
            found.len(),
            1,
            "expected exactly one unguarded join in {expr}: {found:?}"
        );
        assert!(found[0].starts_with(&format!("test:bad_{i}:")), "{found:?}");
    }
    // And guarded shapes pass.
    let good = [
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) topk by (cluster, job, instance, target) (1, diskprobe_target_info)"#,
        r#"diskprobe:probe_latency_p99:last / on (cluster, job, instance, target) group_left max by (cluster, job, instance, target) (diskprobe_target_interval_seconds)"#,
        r#"diskprobe:probe_latency_p99:last * on (cluster, job, instance, target) group_left (cohort) clamp_max(topk by (cluster, job, instance, target) (1, last_over_time(diskprobe_target_info[1h])), 1)"#,
        r#"diskprobe_disk_io_now / ignoring (serial) group_left max without (serial, pod) (diskprobe_disk_io_now)"#,
    ];
    for (i, expr) in good.iter().enumerate() {
        let found = unguarded_joins(&with_rule(&format!("test:good_{i}"), expr));
        assert!(found.is_empty(), "{expr}: {found:?}");
    }
}

crate::tests! {
    every_join_of_the_shipped_rules_is_guarded,
    unguarded_joins_are_reported,
}
