//! What an end-to-end test asks of a server that stores the agent's series and evaluates the
//! rules, whichever engine it is ([`RuleServer`]): a real Prometheus
//! ([`crate::common::prometheus::Prometheus`]) or a real VictoriaMetrics with a real vmalert
//! ([`crate::common::victoria::Victoria`]). A test's body takes `&dyn RuleServer`, so that it
//! runs unchanged on each; [`ready`] says whether an [`Engine`]'s servers are installed.
//!
//! Time: a Prometheus answers a query about now with every scrape and every rule evaluation up
//! to now. VictoriaMetrics makes what it ingests searchable a few seconds later, and vmalert
//! evaluates the rules some seconds in the past (its `-rule.evalDelay`) and writes their results
//! back through remote write, so what they say about a moment is complete only some seconds
//! after it: [`RuleServer::lag`]. A query without a time is evaluated that far in the past
//! ([`RuleServer::view_time`]), so that it sees what a Prometheus would see now, only later;
//! a test that reasons about when something happened compares [`RuleServer::view_time`] with
//! the wall clock's time of its own actions ([`unix_now`]).

use crate::common::engines::Engine;
use serde_json::Value;
use std::time::Duration;

/// Whether `engine`'s server and rule evaluator are installed (a Prometheus; VictoriaMetrics
/// and vmalert): otherwise the test is skipped with the reason (strict: fails). Prints the engine
/// and its version with the caller's file.
#[track_caller]
pub fn ready(engine: Engine) -> bool {
    match engine {
        Engine::Prometheus2 | Engine::Prometheus3 => {
            crate::common::prometheus::engine_ready(engine)
        }
        Engine::VictoriaMetrics => crate::common::victoria::ready(),
    }
}

/// The wall clock as Unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// A server that scrapes the agent, stores its series and evaluates the rules, as an end-to-end
/// test sees it: a Prometheus-compatible query API, the rules' health, the active alerts.
pub trait RuleServer {
    /// What it is, for test output and failure messages (`prometheus2 Classic`).
    fn name(&self) -> String;

    /// GET `path` from its query API (`/api/v1/query`, `/api/v1/query_range`) as JSON; `None`
    /// when it does not answer or not in JSON.
    fn get_json(&self, path: &str) -> Option<Value>;

    /// GET `path` from the API of the rule evaluator (`/api/v1/rules`, `/api/v1/alerts`) as JSON.
    fn rules_get_json(&self, path: &str) -> Option<Value>;

    /// Every failed evaluation the evaluator counted since it started (and, where results travel
    /// to storage, every failed write of them), as lines of text; empty when there was none.
    fn counted_failures(&self) -> Vec<String>;

    /// How long after a moment a query about it sees every scrape and every rule evaluation up
    /// to it; zero where both are visible at once.
    fn lag(&self) -> Duration;

    /// The samples the server reads to evaluate `query` now, where it reports them.
    fn samples_read(&self, _query: &str) -> Option<f64> {
        None
    }

    /// The time (Unix seconds) a query without a time is evaluated at: now, less [`Self::lag`].
    fn view_time(&self) -> f64 {
        unix_now() - self.lag().as_secs_f64()
    }

    /// The result of an instant query evaluated at `time` (Unix seconds; [`Self::view_time`] if
    /// `None`): a vector's elements or a matrix's series, empty on error.
    fn query(&self, q: &str, time: Option<f64>) -> Vec<Value> {
        let time = time.or_else(|| (!self.lag().is_zero()).then(|| self.view_time()));
        let at = time.map(|t| format!("&time={t:.3}")).unwrap_or_default();
        self.get_json(&format!(
            "/api/v1/query?query={}{at}",
            crate::common::prometheus::urlencode(q)
        ))
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
    }

    /// The value of every element of an instant vector query, with its labels.
    fn values(&self, q: &str, time: Option<f64>) -> Vec<(Value, f64)> {
        self.query(q, time)
            .into_iter()
            .filter_map(|e| {
                let v = e["value"][1].as_str()?.parse().ok()?;
                Some((e["metric"].clone(), v))
            })
            .collect()
    }

    /// The one value of an instant vector query, or `None` when it has none (or several).
    fn value(&self, q: &str, time: Option<f64>) -> Option<f64> {
        match self.values(q, time).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }

    /// The samples `(timestamp, value)` of a range-vector selector's one series, at
    /// [`Self::view_time`].
    fn samples(&self, selector: &str) -> Vec<(f64, f64)> {
        let result = self.query(selector, None);
        let [series] = result.as_slice() else {
            return Vec::new();
        };
        series["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p[0].as_f64()?, p[1].as_str()?.parse().ok()?)))
            .collect()
    }

    /// The rule groups of `/api/v1/rules`, each with its `rules`.
    fn rule_groups(&self) -> Vec<Value> {
        let rules = self.rules_get_json("/api/v1/rules").expect("/api/v1/rules");
        let groups = rules["data"]["groups"].as_array().expect("rule groups");
        assert!(!groups.is_empty(), "{}: no rule groups loaded", self.name());
        groups.clone()
    }

    /// Every rule: its group, name, `health`, `lastError`, and whether it has been evaluated
    /// (a `lastEvaluation` after year 1; Prometheus also says `health` `unknown` before).
    fn rules(&self) -> Vec<(String, String, String, String, bool)> {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        self.rule_groups()
            .iter()
            .flat_map(|group| {
                group["rules"].as_array().into_iter().flatten().map(|rule| {
                    let evaluated = rule["health"] != "unknown"
                        && !text(&rule["lastEvaluation"]).starts_with("0001-01-01");
                    (
                        text(&group["name"]),
                        text(&rule["name"]),
                        text(&rule["health"]),
                        text(&rule["lastError"]),
                        evaluated,
                    )
                })
            })
            .collect()
    }

    /// The rules that failed to evaluate: each rule whose `health` is `err` or that has a
    /// `lastError` (its last evaluation), and [`Self::counted_failures`], as lines of text;
    /// empty when every evaluation so far succeeded. A rule not evaluated yet
    /// ([`Self::unevaluated_rules`]) is not among them.
    fn rule_problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self
            .rules()
            .into_iter()
            .filter(|(_, _, health, error, _)| health == "err" || !error.is_empty())
            .map(|(group, rule, health, error, _)| {
                format!("{group} {rule}: health {health:?}, last error {error:?}")
            })
            .collect();
        problems.extend(self.counted_failures());
        problems
    }

    /// The rules (`group rule`) not evaluated yet.
    fn unevaluated_rules(&self) -> Vec<String> {
        self.rules()
            .into_iter()
            .filter(|(_, _, _, _, evaluated)| !evaluated)
            .map(|(group, rule, _, _, _)| format!("{group} {rule}"))
            .collect()
    }

    /// The alerts pending or firing now, as the evaluator lists them (`/api/v1/alerts`: each
    /// with its `labels` and `state`).
    fn alerts(&self) -> Vec<Value> {
        self.rules_get_json("/api/v1/alerts")
            .and_then(|v| v["data"]["alerts"].as_array().cloned())
            .unwrap_or_default()
    }
}
