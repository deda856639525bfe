//! TEMPORARY stand-in until the game sections land.
#![allow(missing_docs)]
use super::Config;

pub trait Section:
    serde::Serialize
    + serde::de::DeserializeOwned
    + Default
    + Clone
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    const NAME: &'static str;
    const RENAMED: &'static [(&'static str, &'static str)] = &[];
    fn check(&self) -> Result<(), (&'static str, String)> {
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct SectionSpec {
    name: &'static str,
}

impl SectionSpec {
    pub fn of<S: Section>() -> SectionSpec {
        SectionSpec { name: S::NAME }
    }
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl Config {
    pub fn section<S: Section>(&self) -> S {
        S::default()
    }
}
