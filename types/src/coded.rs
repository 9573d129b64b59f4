//! A typed value kept where words once were (a job's note, the environment it started in, what
//! a one-click link did): a typed value is stored as a JSON code, words (from elsewhere, or an
//! older Lanes') as themselves, and either reads back as what it was.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub trait Coded: Serialize + DeserializeOwned {
    /// The words it is, when it is words rather than a typed value.
    fn words(&self) -> Option<&str>;

    /// Words read back where no code was stored.
    fn from_words(words: &str) -> Self;

    /// As stored: a JSON code, or the words themselves.
    fn code(&self) -> String {
        match self.words() {
            Some(words) => words.to_string(),
            None => serde_json::to_string(self).unwrap_or_default(),
        }
    }

    /// As read back: the typed value a code names, or the words stored.
    fn read(stored: &str) -> Self {
        serde_json::from_str(stored).unwrap_or_else(|_| Self::from_words(stored))
    }
}
