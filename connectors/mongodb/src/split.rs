//! Reassembly of change events the server split with `$changeStreamSplitLargeEvent`
//! (`cursor.oversize.handling.mode=split`). An event above MongoDB's 16 MiB limit arrives as
//! fragments that follow each other in the stream. Each fragment carries some of the event's
//! top-level fields, its own resume token (`_id`) and `splitEvent: {fragment: n, of: m}`.
//!
//! Invariants:
//! - fragments are taken only as 1, 2, … m in a row, else the stream fails with a data error;
//! - the whole event is handed out with the last fragment and carries that fragment's token, so
//!   a stored resume point never falls inside an event: a restart reads all of its fragments
//!   again;
//! - `splitEvent` is not part of the event handed out; every other field is, once.

use crate::extjson::BadBson;
use crate::rawbson;

/// What one event of the stream amounts to.
pub enum Piece<'a> {
    /// An event that was not split.
    Whole(&'a [u8]),
    /// A fragment whose event is not complete yet.
    Pending,
    /// The last fragment: the whole event, reassembled.
    Complete(Vec<u8>),
}

/// The fragments of a split event read so far.
#[derive(Default)]
pub struct Fragments {
    /// The event's elements collected so far (each element's bytes as stored).
    elements: Vec<u8>,
    /// The fragment expected next (1-based); 0 when no event is pending.
    next: i32,
    of: i32,
}

fn bad(what: String) -> BadBson {
    BadBson(what)
}

impl Fragments {
    /// Whether a split event is waiting for more fragments.
    pub fn pending(&self) -> bool {
        self.next > 0
    }

    /// Takes one event of the stream (its raw BSON).
    pub fn add<'a>(&mut self, event: &'a [u8]) -> Result<Piece<'a>, BadBson> {
        let Some(split) = rawbson::find(event, "splitEvent")? else {
            if self.pending() {
                return Err(bad(format!(
                    "a change event arrived after fragment {} of {} of a split event",
                    self.next - 1,
                    self.of
                )));
            }
            return Ok(Piece::Whole(event));
        };
        if split.kind != rawbson::DOCUMENT {
            return Err(bad("splitEvent is not a document".into()));
        }
        let number = |key: &str| -> Result<i32, BadBson> {
            match rawbson::find(split.value, key)? {
                Some(e) if e.kind == rawbson::INT32 => Ok(i32::from_le_bytes([
                    e.value[0], e.value[1], e.value[2], e.value[3],
                ])),
                Some(e) if e.kind == rawbson::INT64 => i32::try_from(i64::from_le_bytes(
                    e.value[..8].try_into().expect("eight bytes"),
                ))
                .map_err(|_| bad(format!("splitEvent.{key} is out of range"))),
                _ => Err(bad(format!("splitEvent has no integer {key}"))),
            }
        };
        let (fragment, of) = (number("fragment")?, number("of")?);
        let expected = if self.pending() { self.next } else { 1 };
        if fragment != expected || of < 1 || fragment > of || (self.pending() && of != self.of) {
            return Err(bad(format!(
                "fragment {fragment} of {of} of a split change event arrived where fragment {expected}{} was expected",
                if self.pending() { format!(" of {}", self.of) } else { String::new() }
            )));
        }
        let last = fragment == of;
        let mut elements = rawbson::elements(event)?;
        loop {
            let start = elements.offset();
            let Some(element) = elements.next() else {
                break;
            };
            let element = element?;
            let keep = match element.key {
                "splitEvent" => false,
                // Each fragment has its own token; the event keeps the last one's.
                "_id" => last,
                _ => true,
            };
            if keep {
                self.elements
                    .extend_from_slice(&event[start..elements.offset()]);
            }
        }
        if !last {
            self.next = fragment + 1;
            self.of = of;
            return Ok(Piece::Pending);
        }
        let body = std::mem::take(&mut self.elements);
        self.next = 0;
        self.of = 0;
        let len = i32::try_from(body.len() + 5)
            .map_err(|_| bad("a reassembled change event above 2 GiB".into()))?;
        let mut whole = Vec::with_capacity(body.len() + 5);
        whole.extend_from_slice(&len.to_le_bytes());
        whole.extend_from_slice(&body);
        whole.push(0);
        Ok(Piece::Complete(whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, Document};

    fn bytes(d: &Document) -> Vec<u8> {
        mongodb::bson::serialize_to_vec(d).unwrap()
    }

    #[test]
    fn fragments_become_one_event_with_the_last_token() {
        let first = bytes(&doc! {
            "_id": {"_data": "T1"}, "splitEvent": {"fragment": 1, "of": 3},
            "operationType": "update", "fullDocumentBeforeChange": {"_id": 1, "big": "a"},
        });
        let second = bytes(&doc! {
            "_id": {"_data": "T2"}, "splitEvent": {"fragment": 2, "of": 3},
            "fullDocument": {"_id": 1, "big": "b"},
        });
        let third = bytes(&doc! {
            "_id": {"_data": "T3"}, "splitEvent": {"fragment": 3, "of": 3},
            "ns": {"db": "shop", "coll": "orders"}, "documentKey": {"_id": 1},
        });
        let mut f = Fragments::default();
        assert!(matches!(f.add(&first).unwrap(), Piece::Pending));
        assert!(f.pending());
        assert!(matches!(f.add(&second).unwrap(), Piece::Pending));
        let Piece::Complete(whole) = f.add(&third).unwrap() else {
            panic!("the last fragment completes the event");
        };
        assert!(!f.pending());
        let event: Document = mongodb::bson::deserialize_from_slice(&whole).unwrap();
        assert_eq!(
            event,
            doc! {
                "operationType": "update", "fullDocumentBeforeChange": {"_id": 1, "big": "a"},
                "fullDocument": {"_id": 1, "big": "b"},
                "_id": {"_data": "T3"},
                "ns": {"db": "shop", "coll": "orders"}, "documentKey": {"_id": 1},
            }
        );
        // Ordinary events pass through untouched.
        let plain = bytes(&doc! {"_id": {"_data": "T4"}, "operationType": "insert"});
        assert!(matches!(f.add(&plain).unwrap(), Piece::Whole(e) if e == plain.as_slice()));
    }

    #[test]
    fn fragments_out_of_order_or_interrupted_are_errors() {
        let frag = |n: i32, of: i32| {
            bytes(
                &doc! {"_id": {"_data": format!("T{n}")}, "splitEvent": {"fragment": n, "of": of}, "x": n},
            )
        };
        let mut f = Fragments::default();
        let e = f.add(&frag(2, 2)).err().expect("a second fragment first");
        assert!(e.0.contains("fragment 1 was expected"), "{}", e.0);
        let mut f = Fragments::default();
        assert!(matches!(f.add(&frag(1, 3)).unwrap(), Piece::Pending));
        let e = f.add(&frag(3, 3)).err().expect("a skipped fragment");
        assert!(e.0.contains("fragment 2 of 3 was expected"), "{}", e.0);
        let mut f = Fragments::default();
        assert!(matches!(f.add(&frag(1, 2)).unwrap(), Piece::Pending));
        let plain = bytes(&doc! {"_id": {"_data": "T9"}, "operationType": "insert"});
        let e = f.add(&plain).err().expect("an event inside a split one");
        assert!(e.0.contains("after fragment 1 of 2"), "{}", e.0);
    }
}
