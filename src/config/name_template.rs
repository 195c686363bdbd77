//! Name templates of `[[discover]]` rules: how a target found by a rule is named, from the rule
//! regex's capture groups and facts about the device under it.
//!
//! `$1`.. (or `${1}`) are capture groups; `{kname}`, `{serial}`, `{wwn}`, `{volume_id}`,
//! `{lun}`, `{cloud}`, `{model}` and `{vendor}` facts (the labels of `diskprobe_disk_info`); `{wwn|serial|kname}`
//! the first of the listed facts that the device has (not empty), so that a disk without a WWN is
//! still named after its serial, and one without either after its kernel name; `$$`, `{{` and `}}`
//! are a literal `$`, `{` and `}`. A template whose placeholder has none of its facts names
//! nothing ([`Unnamed`]): the match is not probed, and counted.

use crate::blockdev::BlockDevice;

/// A fact about the device under a match, read from sysfs, for name templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fact {
    /// `{kname}`: the kernel name (`sdb`, `nvme0n1`).
    Kname,
    /// `{serial}`: the device's serial number.
    Serial,
    /// `{wwn}`: the device's World Wide Name (`wwid`).
    Wwn,
    /// `{volume_id}`: what the cloud calls the volume (EBS `vol-…`, a GCP device name, a virtio
    /// serial).
    VolumeId,
    /// `{lun}`: an Azure data disk's LUN.
    Lun,
    /// `{cloud}`: `aws`, `azure`, `gcp`, or empty.
    Cloud,
    /// `{model}`: the device's model (`Amazon Elastic Block Store`).
    Model,
    /// `{vendor}`: the device's vendor (`Msft`, `Google`).
    Vendor,
}

impl Fact {
    const ALL: [Fact; 8] = [
        Fact::Kname,
        Fact::Serial,
        Fact::Wwn,
        Fact::VolumeId,
        Fact::Lun,
        Fact::Cloud,
        Fact::Model,
        Fact::Vendor,
    ];

    /// The placeholder's name, between braces in a template.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Fact::Kname => "kname",
            Fact::Serial => "serial",
            Fact::Wwn => "wwn",
            Fact::VolumeId => "volume_id",
            Fact::Lun => "lun",
            Fact::Cloud => "cloud",
            Fact::Model => "model",
            Fact::Vendor => "vendor",
        }
    }
}

/// The facts of `device` (none without one), for [`NameTemplate::render`].
pub(crate) fn facts(device: Option<&BlockDevice>) -> impl Fn(Fact) -> Option<String> + '_ {
    move |fact| {
        let d = device?;
        Some(match fact {
            Fact::Kname => d.kname.clone(),
            Fact::Serial => d.serial.clone(),
            Fact::Wwn => d.wwn.clone(),
            Fact::VolumeId => d.cloud.volume_id.clone(),
            Fact::Lun => d.cloud.lun.clone(),
            Fact::Cloud => d.cloud.cloud.as_str().to_owned(),
            Fact::Model => d.model.clone(),
            Fact::Vendor => d.vendor.clone(),
        })
    }
}

/// A `cohort` template rendered for the device under its target, into the characters a cohort
/// allows: each run of other characters (a model's spaces) becomes one `_`, the result is
/// trimmed of `_` and cut to [`MAX_COHORT_LEN`]. A
/// placeholder none of whose facts the device has leaves the cohort empty (the rules then
/// take the disk's model).
pub fn cohort(template: &str, device: Option<&BlockDevice>) -> String {
    if !template.contains(['{', '$']) {
        return template.to_owned();
    }
    let Ok(t) = NameTemplate::parse(template) else {
        return String::new();
    };
    let Ok(text) = t.render(&[], facts(device)) else {
        return String::new();
    };
    let mut out = String::new();
    for c in text.chars() {
        if cohort_char(c) {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let out = out.trim_matches('_');
    let mut end = out.len().min(MAX_COHORT_LEN);
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].trim_end_matches('_').to_owned()
}

/// Longest `cohort` accepted.
pub(crate) const MAX_COHORT_LEN: usize = 128;

/// A character a cohort may hold as it is.
pub(crate) fn cohort_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Group(usize),
    /// The first of these facts that is not empty.
    Facts(Vec<Fact>),
}

/// Why a template gives a match no name: the device has none of the facts of one of its
/// placeholders (or they are empty), listed as written (`wwn|serial`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unnamed(pub Vec<Fact>);

impl Unnamed {
    /// The placeholder's facts as written: `wwn|serial`.
    pub(crate) fn facts(&self) -> String {
        self.0
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("|")
    }
}

/// A target name template (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameTemplate {
    text: String,
    pieces: Vec<Piece>,
}

/// The facts of a placeholder `{a|b|c}` (`inner` is what is between the braces).
fn placeholder_facts(inner: &str, closed: bool) -> Result<Vec<Fact>, String> {
    let unknown = || {
        format!(
            "unknown placeholder {{{inner}{}; expected {{kname}}, {{serial}}, {{wwn}}, {{volume_id}}, {{lun}}, {{cloud}}, {{model}}, {{vendor}} or several of them as {{wwn|serial|kname}} (write {{{{ for a literal {{)",
            if closed { "}" } else { "" }
        )
    };
    if !closed {
        return Err(unknown());
    }
    let mut out = Vec::new();
    for name in inner.split('|') {
        let fact = Fact::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(unknown)?;
        if out.contains(&fact) {
            return Err(format!("{{{inner}}} lists {name} twice"));
        }
        out.push(fact);
    }
    Ok(out)
}

/// A capture group number after a `$` (the `$` consumed); `None` for `$$`.
fn group(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<Option<usize>, String> {
    match chars.peek() {
        Some('$') => {
            chars.next();
            Ok(None)
        }
        Some('{') => {
            chars.next();
            let inner: String = chars.by_ref().take_while(|&c| c != '}').collect();
            inner.parse::<usize>().map(Some).map_err(|_| {
                format!("expected a capture group number in ${{...}}, found ${{{inner}")
            })
        }
        Some(d) if d.is_ascii_digit() => {
            let mut digits = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(*d);
                chars.next();
            }
            digits
                .parse::<usize>()
                .map(Some)
                .map_err(|_| format!("capture group number {digits} is too large"))
        }
        _ => Err(
            "a $ must be followed by a capture group number ($1, ${1}); write $$ for a literal $"
                .to_owned(),
        ),
    }
}

impl NameTemplate {
    /// Parses `text`; the error says what is wrong.
    pub(crate) fn parse(text: &str) -> Result<NameTemplate, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        let flush = |literal: &mut String, pieces: &mut Vec<Piece>| {
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(literal)));
            }
        };
        while let Some(c) = chars.next() {
            match c {
                '$' => match group(&mut chars)? {
                    None => literal.push('$'),
                    Some(n) => {
                        flush(&mut literal, &mut pieces);
                        pieces.push(Piece::Group(n));
                    }
                },
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '{' => {
                    let mut inner = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        inner.push(c);
                    }
                    let facts = placeholder_facts(&inner, closed)?;
                    flush(&mut literal, &mut pieces);
                    pieces.push(Piece::Facts(facts));
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err("unmatched }; write }} for a literal }".to_owned()),
                c => literal.push(c),
            }
        }
        flush(&mut literal, &mut pieces);
        Ok(NameTemplate {
            text: text.to_owned(),
            pieces,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The literal text of the template (what is neither a group nor a placeholder).
    pub(crate) fn literals(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Text(t) => Some(t.as_str()),
            _ => None,
        })
    }

    /// This template with its capture groups replaced by `groups` (a group that did not take
    /// part by nothing), its placeholders kept: what a rule's match leaves for the facts of the
    /// device to fill in later.
    pub(crate) fn with_groups(&self, groups: &[Option<&str>]) -> NameTemplate {
        let escape = |t: &str| t.replace('$', "$$").replace('{', "{{").replace('}', "}}");
        let mut text = String::new();
        let mut pieces: Vec<Piece> = Vec::new();
        for piece in &self.pieces {
            let literal = match piece {
                Piece::Text(t) => Some(t.as_str()),
                Piece::Group(n) => Some(groups.get(*n).copied().flatten().unwrap_or("")),
                Piece::Facts(facts) => {
                    let names: Vec<&str> = facts.iter().map(|f| f.as_str()).collect();
                    text.push_str(&format!("{{{}}}", names.join("|")));
                    pieces.push(piece.clone());
                    None
                }
            };
            if let Some(t) = literal {
                text.push_str(&escape(t));
                match pieces.last_mut() {
                    Some(Piece::Text(prev)) => prev.push_str(t),
                    _ if !t.is_empty() => pieces.push(Piece::Text(t.to_owned())),
                    _ => {}
                }
            }
        }
        NameTemplate { text, pieces }
    }

    /// Whether the template is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The highest capture group the template uses (0 when it uses none).
    pub(crate) fn max_group(&self) -> usize {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Group(n) => Some(*n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    #[cfg(test)]
    /// Whether the template uses `fact` (alone or as one of several).
    pub(crate) fn uses(&self, fact: Fact) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, Piece::Facts(f) if f.contains(&fact)))
    }

    /// The name for a match, trimmed: `groups[i]` is capture group `i` (a group that did not take
    /// part gives nothing), `fact` what the device says. An error names the facts of the first
    /// placeholder none of whose facts the device has (or has empty).
    pub(crate) fn render(
        &self,
        groups: &[Option<&str>],
        fact: impl Fn(Fact) -> Option<String>,
    ) -> Result<String, Unnamed> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Group(n) => out.push_str(groups.get(*n).copied().flatten().unwrap_or("")),
                Piece::Facts(facts) => {
                    let first = facts
                        .iter()
                        .find_map(|f| fact(*f).filter(|v| !v.trim().is_empty()));
                    match first {
                        Some(v) => out.push_str(&v),
                        None => return Err(Unnamed(facts.clone())),
                    }
                }
            }
        }
        Ok(out.trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, groups: &[Option<&str>]) -> Result<String, Unnamed> {
        NameTemplate::parse(template)
            .unwrap()
            .render(groups, |f| match f {
                Fact::Kname => Some("sdb".to_owned()),
                Fact::Serial => Some("S3X".to_owned()),
                Fact::VolumeId => Some("vol-0abc".to_owned()),
                Fact::Wwn | Fact::Lun | Fact::Cloud | Fact::Model | Fact::Vendor => None,
            })
    }

    #[test]
    fn cohorts_are_rendered_into_the_characters_a_cohort_allows() {
        let disk = crate::blockdev::BlockDevice {
            kname: "nvme1n1".into(),
            model: "Amazon Elastic Block Store  ".into(),
            vendor: String::new(),
            ..Default::default()
        };
        assert_eq!(cohort("{model}", Some(&disk)), "Amazon_Elastic_Block_Store");
        assert_eq!(
            cohort("ebs-{model}", Some(&disk)),
            "ebs-Amazon_Elastic_Block_Store"
        );
        assert_eq!(cohort("io2", Some(&disk)), "io2");
        // A fact the disk does not have (or no disk): no cohort, the rules take the model.
        assert_eq!(cohort("x-{vendor}", Some(&disk)), "");
        assert_eq!(cohort("{vendor|kname}", Some(&disk)), "nvme1n1");
        assert_eq!(cohort("{model}", None), "");
        let long = crate::blockdev::BlockDevice {
            model: "é".repeat(100) + &"m".repeat(200),
            ..Default::default()
        };
        let c = cohort("{model}", Some(&long));
        assert_eq!(c.len(), MAX_COHORT_LEN);
        assert!(c.chars().all(cohort_char) && !c.starts_with('_'));
    }

    #[test]
    fn groups_are_filled_in_and_placeholders_kept() {
        let t = NameTemplate::parse("ebs-$1-{model|kname}").unwrap();
        let g = t.with_groups(&[Some("all"), Some("g{p}3$")]);
        assert_eq!(g.as_str(), "ebs-g{{p}}3$$-{model|kname}");
        assert_eq!(g, NameTemplate::parse(g.as_str()).unwrap());
        assert_eq!(g.max_group(), 0);
        assert!(g.uses(Fact::Model));
        assert_eq!(
            NameTemplate::parse("$2x")
                .unwrap()
                .with_groups(&[None])
                .as_str(),
            "x"
        );
    }

    #[test]
    fn templates_expand_groups_and_facts() {
        assert_eq!(
            render("pv-$1", &[Some("all"), Some("vol")]),
            Ok("pv-vol".into())
        );
        assert_eq!(render("${1}0", &[None, Some("a")]), Ok("a0".into()));
        assert_eq!(
            render("$10", &[None, Some("a")]),
            Ok("".into()),
            "$10 is group 10"
        );
        assert_eq!(render("{kname}-{serial}", &[]), Ok("sdb-S3X".into()));
        assert_eq!(render("$$ {{x}} $1", &[None, None]), Ok("$ {x}".into()));
        assert_eq!(render("disk-{wwn}", &[]), Err(Unnamed(vec![Fact::Wwn])));
        let t = NameTemplate::parse("a$2b$1{serial}").unwrap();
        assert_eq!(t.max_group(), 2);
        assert!(t.uses(Fact::Serial) && !t.uses(Fact::Kname));
    }

    #[test]
    fn a_fallback_takes_the_first_fact_the_device_has() {
        assert_eq!(
            render("disk-{wwn|serial|kname}", &[]),
            Ok("disk-S3X".into())
        );
        assert_eq!(
            render("disk-{wwn|kname|serial}", &[]),
            Ok("disk-sdb".into())
        );
        assert_eq!(render("{serial|wwn}", &[]), Ok("S3X".into()));
        assert_eq!(
            render("disk-{volume_id|wwn|serial|kname}", &[]),
            Ok("disk-vol-0abc".into())
        );
        assert_eq!(render("{lun|kname}", &[]), Ok("sdb".into()));
        let t = NameTemplate::parse("d-{wwn|serial}").unwrap();
        assert!(t.uses(Fact::Wwn) && t.uses(Fact::Serial) && !t.uses(Fact::Kname));
        // A fact that is only blanks counts as missing (sysfs pads some serials with spaces).
        let blank = |f: Fact| match f {
            Fact::Wwn => Some("   ".to_owned()),
            Fact::Serial => Some(String::new()),
            Fact::Kname => Some("vdb".to_owned()),
            Fact::VolumeId | Fact::Lun | Fact::Cloud | Fact::Model | Fact::Vendor => None,
        };
        assert_eq!(
            NameTemplate::parse("{wwn|serial|kname}")
                .unwrap()
                .render(&[], blank),
            Ok("vdb".into())
        );
        let none = NameTemplate::parse("disk-{wwn|serial}")
            .unwrap()
            .render(&[], blank)
            .unwrap_err();
        assert_eq!(none, Unnamed(vec![Fact::Wwn, Fact::Serial]));
        assert_eq!(none.facts(), "wwn|serial");
    }

    #[test]
    fn bad_templates_say_why() {
        for (text, message) in [
            ("a$", "a $ must be followed"),
            ("a$x", "a $ must be followed"),
            (
                "${x}",
                "expected a capture group number in ${...}, found ${x",
            ),
            ("{modle}", "unknown placeholder {modle}"),
            ("{kname", "unknown placeholder {kname;"),
            ("{wwn|size}", "unknown placeholder {wwn|size}"),
            ("{wwn|}", "unknown placeholder {wwn|}"),
            ("{|wwn}", "unknown placeholder {|wwn}"),
            ("{wwn|serial|wwn}", "{wwn|serial|wwn} lists wwn twice"),
            ("a}", "unmatched }"),
            ("$99999999999999999999999", "too large"),
        ] {
            let err = NameTemplate::parse(text).unwrap_err();
            assert!(err.contains(message), "{text}: {err}");
        }
    }
}
