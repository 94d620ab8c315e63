//! The one rule on paths the config and the requests share: a path that
//! must stay where it points may not climb with `..`.

use std::path::{Component, Path};

pub(crate) fn has_dot_dot(path: &Path) -> bool {
    path.components().any(|c| c == Component::ParentDir)
}
