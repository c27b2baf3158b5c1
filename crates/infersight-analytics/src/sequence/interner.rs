//! Maps string event keys (template names, hashes) to dense [`EventId`]s for the sequence model.

use std::collections::HashMap;

use super::EventId;

/// Interns strings to ids `0, 1, 2, …` in first-seen order, so the same input order gives the
/// same ids on every run.
#[derive(Debug, Clone, Default)]
pub struct EventInterner {
    id_of: HashMap<String, EventId>,
    names: Vec<String>,
}

impl EventInterner {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `key`, assigning the next free one if it is new. An id assigned after training
    /// is unknown to the model and therefore flagged as an unseen event when scored.
    pub fn intern(&mut self, key: &str) -> EventId {
        if let Some(&id) = self.id_of.get(key) {
            return id;
        }
        // Template alphabets are tiny compared with u32::MAX.
        let id = self.names.len() as EventId;
        self.id_of.insert(key.to_owned(), id);
        self.names.push(key.to_owned());
        id
    }

    /// Interns every key of a session.
    pub fn intern_session<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>) -> Vec<EventId> {
        keys.into_iter().map(|key| self.intern(key)).collect()
    }

    /// The id of `key` if it was interned.
    pub fn get(&self, key: &str) -> Option<EventId> {
        self.id_of.get(key).copied()
    }

    /// The key of `id` if it was assigned.
    pub fn name(&self, id: EventId) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
