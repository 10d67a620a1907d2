//! `field.exclude.list` and `field.renames`: fields left out of or renamed in the documents
//! and update descriptions of one collection.
//!
//! Paths are dotted (`a.b.c`); a path reaches into nested documents and into every document
//! of an array on the way. A rule names its collection as Debezium's do: `<db>.<collection>`
//! first, with `*` wildcards and any letter case. Invariant: rules only ever remove or rename
//! the named fields; everything else keeps its value and order.

use mongodb::bson::{Bson, Document};

/// The rules of one collection (`db.collection` prefix removed from the paths).
#[derive(Clone, Debug, Default)]
pub struct FieldRules {
    excludes: Vec<Vec<String>>,
    renames: Vec<(Vec<String>, String)>,
}

/// The field path of rule `rule` (`<db>.<collection>.<field path>`) when it applies to
/// `db.collection`, as Debezium's `FieldSelector` decides: the rule's first two components
/// are the database and collection names, `*` in them matches any characters, and they are
/// compared case-insensitively. A collection name with dots is also matched whole (`shop.a.b.x`
/// for collection `a.b`), which Debezium's split cannot express.
fn field_path<'a>(rule: &'a str, db: &str, collection: &str) -> Option<&'a str> {
    let whole = db.len() + 1 + collection.len() + 1;
    let bytes = rule.as_bytes();
    if bytes.len() > whole
        && rule.is_char_boundary(whole)
        && bytes[whole - 1] == b'.'
        && bytes[..db.len()].eq_ignore_ascii_case(db.as_bytes())
        && bytes[db.len()] == b'.'
        && bytes[db.len() + 1..whole - 1].eq_ignore_ascii_case(collection.as_bytes())
    {
        return Some(&rule[whole..]);
    }
    let mut parts = rule.splitn(3, '.');
    let (Some(d), Some(c), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    (!rest.is_empty() && wildcard_match(d, db) && wildcard_match(c, collection)).then_some(rest)
}

/// Whether `name` matches `pattern`, where `*` stands for any characters (none too), ASCII
/// case ignored.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // Greedy matching with backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i].eq_ignore_ascii_case(&n[j]) {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|b| *b == b'*')
}

fn split(path: &str) -> Vec<String> {
    path.split('.').map(str::to_owned).collect()
}

impl FieldRules {
    /// The rules of `db.collection` from the connector's lists.
    pub fn for_collection(
        db: &str,
        collection: &str,
        excludes: &[String],
        renames: &[(String, String)],
    ) -> FieldRules {
        FieldRules {
            excludes: excludes
                .iter()
                .filter_map(|p| field_path(p, db, collection))
                .map(split)
                .collect(),
            renames: renames
                .iter()
                .filter_map(|(p, n)| field_path(p, db, collection).map(|p| (split(p), n.clone())))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.excludes.is_empty() && self.renames.is_empty()
    }

    /// Applies the rules to a document.
    pub fn apply(&self, doc: &mut Document) {
        for path in &self.excludes {
            remove(doc, path);
        }
        for (path, name) in &self.renames {
            rename(doc, path, name);
        }
    }

    /// Applies the rules to an update description's field paths: excluded paths (and paths
    /// inside them) are dropped; renamed ones get their new last component.
    pub fn apply_path(&self, path: &str) -> Option<String> {
        let parts: Vec<&str> = path.split('.').collect();
        // Array indexes in update paths do not count as path components of the rules.
        let named: Vec<&str> = parts
            .iter()
            .copied()
            .filter(|p| !p.chars().all(|c| c.is_ascii_digit()))
            .collect();
        if self
            .excludes
            .iter()
            .any(|e| named.len() >= e.len() && named[..e.len()] == e[..])
        {
            return None;
        }
        let mut out: Vec<String> = parts.iter().map(|p| (*p).to_owned()).collect();
        for (rule, name) in &self.renames {
            if named.len() >= rule.len() && named[..rule.len()] == rule[..] {
                // The component that matched the rule's last one.
                let mut seen = 0;
                for part in out.iter_mut() {
                    if part.chars().all(|c| c.is_ascii_digit()) {
                        continue;
                    }
                    seen += 1;
                    if seen == rule.len() {
                        *part = name.clone();
                        break;
                    }
                }
            }
        }
        Some(out.join("."))
    }

    /// The rules that reach inside the value set at update path `path` (a `$set` of a whole
    /// sub-document or array element whose fields the rules name): each as the rest of its
    /// path below `path`, and the new name for a rename. Empty for most paths.
    fn inside<'a>(&'a self, path: &str) -> Vec<(&'a [String], Option<&'a str>)> {
        if self.is_empty() {
            return Vec::new();
        }
        let named: Vec<&str> = path
            .split('.')
            .filter(|p| !p.chars().all(|c| c.is_ascii_digit()))
            .collect();
        let below = |rule: &'a [String]| -> Option<&'a [String]> {
            (rule.len() > named.len() && rule[..named.len()] == named[..])
                .then(|| &rule[named.len()..])
        };
        let mut found: Vec<(&[String], Option<&str>)> = Vec::new();
        for e in &self.excludes {
            if let Some(rest) = below(e) {
                found.push((rest, None));
            }
        }
        for (r, name) in &self.renames {
            if let Some(rest) = below(r) {
                found.push((rest, Some(name.as_str())));
            }
        }
        found
    }

    /// Whether [`FieldRules::apply_inside`] would change anything set at update path `path`.
    pub fn reaches_inside(&self, path: &str) -> bool {
        !self.inside(path).is_empty()
    }

    /// Applies the rules to the value set at update path `path` (see
    /// [`FieldRules::reaches_inside`]): a sub-document, or an array of them, gets the fields
    /// the rules name below `path` removed or renamed, as a whole document would.
    pub fn apply_inside(&self, path: &str, value: &mut Bson) {
        for (rest, name) in self.inside(path) {
            let docs: Vec<&mut Document> = match value {
                Bson::Document(d) => vec![d],
                Bson::Array(items) => items
                    .iter_mut()
                    .filter_map(|i| match i {
                        Bson::Document(d) => Some(d),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for d in docs {
                match name {
                    None => remove(d, rest),
                    Some(n) => rename(d, rest, n),
                }
            }
        }
    }
}

fn remove(doc: &mut Document, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        doc.remove(first);
        return;
    }
    match doc.get_mut(first) {
        Some(Bson::Document(inner)) => remove(inner, rest),
        Some(Bson::Array(items)) => {
            for item in items {
                if let Bson::Document(inner) = item {
                    remove(inner, rest);
                }
            }
        }
        _ => {}
    }
}

fn rename(doc: &mut Document, path: &[String], name: &str) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        if !doc.contains_key(first) || doc.contains_key(name) {
            return;
        }
        // Keep the member's position: rebuild the document in order.
        let old = std::mem::take(doc);
        for (k, v) in old {
            if k == *first {
                doc.insert(name, v);
            } else {
                doc.insert(k, v);
            }
        }
        return;
    }
    match doc.get_mut(first) {
        Some(Bson::Document(inner)) => rename(inner, rest, name),
        Some(Bson::Array(items)) => {
            for item in items {
                if let Bson::Document(inner) = item {
                    rename(inner, rest, name);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn excludes_and_renames_nested_and_in_arrays() {
        let rules = FieldRules::for_collection(
            "shop",
            "orders",
            &[
                "shop.orders.secret".into(),
                "shop.orders.items.cost".into(),
                "other.x.y".into(),
            ],
            &[("shop.orders.customer.name".into(), "fullName".into())],
        );
        let mut d = doc! {
            "_id": 1, "secret": "x", "customer": {"name": "Ada", "age": 3},
            "items": [{"sku": "a", "cost": 1}, {"sku": "b", "cost": 2}],
        };
        rules.apply(&mut d);
        assert_eq!(
            d,
            doc! {"_id": 1, "customer": {"fullName": "Ada", "age": 3}, "items": [{"sku": "a"}, {"sku": "b"}]}
        );
        assert_eq!(rules.apply_path("secret"), None);
        assert_eq!(rules.apply_path("items.1.cost"), None);
        assert_eq!(
            rules.apply_path("items.1.sku").as_deref(),
            Some("items.1.sku")
        );
        assert_eq!(
            rules.apply_path("customer.name").as_deref(),
            Some("customer.fullName")
        );
        assert!(FieldRules::for_collection("shop", "other", &[], &[]).is_empty());
    }

    #[test]
    fn rule_namespaces_take_wildcards_and_ignore_case_as_debezium() {
        let excludes = [
            "*.orders.secret".to_owned(),
            "Shop.Customers.ssn".to_owned(),
            "shop.cust*.note".to_owned(),
            "shop.a.b.x".to_owned(),
            "other.orders".to_owned(),
        ];
        let has = |db: &str, coll: &str, path: &str| {
            FieldRules::for_collection(db, coll, &excludes, &[])
                .apply_path(path)
                .is_none()
        };
        assert!(has("shop", "orders", "secret"));
        assert!(has("any", "orders", "secret"));
        assert!(!has("shop", "orders2", "secret"));
        assert!(has("shop", "customers", "ssn"));
        assert!(has("shop", "customers", "note"));
        assert!(!has("shop", "orders", "note"));
        assert!(
            has("shop", "a.b", "x"),
            "a dotted collection name, matched whole"
        );
        assert!(
            FieldRules::for_collection("other", "orders", &excludes, &[])
                .apply_path("x")
                .is_some(),
            "a rule without a field path names no field"
        );
        assert!(wildcard_match("a*b*c", "aXXbYc"));
        assert!(wildcard_match("*", ""));
        assert!(!wildcard_match("a*c", "abd"));
    }

    #[test]
    fn rules_reach_into_values_set_at_a_parent_path() {
        let rules = FieldRules::for_collection(
            "shop",
            "orders",
            &[
                "shop.orders.customer.ssn".into(),
                "shop.orders.items.cost".into(),
            ],
            &[("shop.orders.customer.name".into(), "fullName".into())],
        );
        assert!(rules.reaches_inside("customer"));
        assert!(rules.reaches_inside("items.3"));
        assert!(
            !rules.reaches_inside("customer.ssn"),
            "the path itself is excluded"
        );
        assert!(!rules.reaches_inside("status"));
        let mut customer = Bson::Document(doc! {"name": "Ada", "ssn": "1", "age": 3});
        rules.apply_inside("customer", &mut customer);
        assert_eq!(customer, Bson::Document(doc! {"fullName": "Ada", "age": 3}));
        let mut item = Bson::Document(doc! {"sku": "a", "cost": 1});
        rules.apply_inside("items.3", &mut item);
        assert_eq!(item, Bson::Document(doc! {"sku": "a"}));
        let mut items = Bson::Array(vec![
            Bson::Document(doc! {"sku": "a", "cost": 1}),
            Bson::Document(doc! {"sku": "b", "cost": 2}),
        ]);
        rules.apply_inside("items", &mut items);
        assert_eq!(
            items,
            Bson::Array(vec![
                Bson::Document(doc! {"sku": "a"}),
                Bson::Document(doc! {"sku": "b"})
            ])
        );
    }
}
