//! Finding scenario files: the files named on the command line, and the `*.scenario.yaml`
//! under the folders named there, each once however many ways it is reached.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::LoadError;

/// What a scenario file's name ends with: folders are searched for these only, so flows, CI
/// files and any other YAML beside the scenarios are never mistaken for them.
pub const SCENARIO_SUFFIXES: [&str; 2] = [".scenario.yaml", ".scenario.yml"];

/// Whether `path`'s file name ends with a scenario suffix.
#[must_use]
pub fn is_scenario_file(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        SCENARIO_SUFFIXES
            .iter()
            .any(|s| n.ends_with(s) && n.len() > s.len())
    })
}

/// The scenario files under `paths`: files named on their own are taken whatever their name,
/// folders are searched recursively for `*.scenario.yaml` (and `*.scenario.yml`), hidden files
/// and folders (`.name`) skipped, each folder's files in name order.
///
/// Symbolic links are followed, but a folder already searched (the same folder by its canonical
/// path, through a link or named twice) is not searched again, so a link to a parent ends; a
/// file found again (by its canonical path) is listed once, where it was first found.
///
/// # Errors
/// A path that does not exist, or a folder that cannot be read.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut found = Found::default();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| {
            let name = path.display().to_string();
            if e.kind() == std::io::ErrorKind::NotFound {
                LoadError::file(&name, "no such file or folder")
            } else {
                LoadError::file(&name, format!("cannot read: {e}"))
            }
        })?;
        if meta.is_dir() {
            found.walk(path)?;
        } else {
            // Whatever it is: reading it says what is wrong with one that is no regular file.
            found.file(path);
        }
    }
    Ok(found.files)
}

/// What [`discover`] has found so far, and the canonical paths it has been to.
#[derive(Default)]
struct Found {
    files: Vec<PathBuf>,
    seen_files: HashSet<PathBuf>,
    seen_dirs: HashSet<PathBuf>,
}

impl Found {
    fn file(&mut self, path: &Path) {
        if self.seen_files.insert(canonical(path)) {
            self.files.push(path.to_path_buf());
        }
    }

    fn walk(&mut self, dir: &Path) -> Result<(), LoadError> {
        if !self.seen_dirs.insert(canonical(dir)) {
            return Ok(());
        }
        let name = dir.display().to_string();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| LoadError::file(&name, format!("cannot read the folder: {e}")))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                !p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
            })
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                self.walk(&path)?;
            } else if is_scenario_file(&path) {
                self.file(&path);
            }
        }
        Ok(())
    }
}

/// `path` with every link resolved: what tells one file or folder reached two ways. A path that
/// cannot be resolved (a dangling link) stands for itself.
#[must_use]
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `discover(paths)`, or a failure if it has not ended within a few seconds (a walk that
    /// loops would otherwise hang the tests).
    fn discover_quickly(paths: &[PathBuf]) -> Vec<PathBuf> {
        let paths = paths.to_vec();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(discover(&paths)));
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("the search did not end")
            .unwrap()
    }

    #[test]
    fn a_file_named_twice_or_found_again_in_a_folder_is_listed_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f.scenario.yaml");
        let g = dir.path().join("g.scenario.yaml");
        std::fs::write(&f, "steps: []\n").unwrap();
        std::fs::write(&g, "steps: []\n").unwrap();
        let dir = dir.path().to_path_buf();
        // The order is kept: a file is listed where it is first found.
        assert_eq!(
            discover_quickly(&[g.clone(), f.clone(), g.clone(), dir.clone()]),
            [g.clone(), f.clone()]
        );
        assert_eq!(
            discover_quickly(&[dir.clone(), dir.join("."), f.clone()]),
            [f, g]
        );
    }

    #[test]
    fn a_path_that_is_not_there_is_said_to_be_missing() {
        let dir = tempfile::tempdir().unwrap();
        let e = discover(&[dir.path().join("nope.yaml")]).unwrap_err();
        assert!(
            e.to_string().ends_with("nope.yaml: no such file or folder"),
            "{e}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn links_back_up_are_followed_once_and_end() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        // A link to the parent: each level listed the scenario again, 41 times, until ELOOP.
        let looped = root.path().join("loopdir");
        std::fs::create_dir(&looped).unwrap();
        std::fs::write(looped.join("s.scenario.yaml"), "steps: []\n").unwrap();
        symlink("..", looped.join("up")).unwrap();
        assert_eq!(
            discover_quickly(std::slice::from_ref(&looped)),
            [looped.join("s.scenario.yaml")]
        );
        // Two links to the parent: 2^40 paths, never ending, memory growing.
        let d = root.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("t.scenario.yaml"), "steps: []\n").unwrap();
        symlink("..", d.join("a")).unwrap();
        symlink("..", d.join("b")).unwrap();
        let found = discover_quickly(std::slice::from_ref(&d));
        // The parent is searched once, through `a`: the scenarios of `loopdir` beside `d` too.
        assert_eq!(
            found,
            [
                d.join("a/loopdir/s.scenario.yaml"),
                d.join("t.scenario.yaml")
            ]
        );
        // A link to a file found in the same search is the same file.
        let alias = root.path().join("alias.scenario.yaml");
        symlink(d.join("t.scenario.yaml"), &alias).unwrap();
        assert_eq!(
            discover_quickly(&[d.join("t.scenario.yaml"), alias]),
            [d.join("t.scenario.yaml")]
        );
    }
}
