//! Importers: the testbed's trip ground truth, WMN Lab metro CSVs, UCC 5G driving CSVs, and a
//! relay's own context log.
//!
//! Each importer turns files into [`TripData`] and an [`ImportReport`]. A row that cannot be
//! used is never dropped silently and never aborts the import: it is counted, and its
//! `file:line` and the reason are kept in the report. A file that is unusable as a whole (no
//! header, a missing column) is an error naming the file.

pub mod relay;
pub mod sim;
pub(crate) mod time;
pub mod ucc5g;
pub mod wmnlab;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::record::{HandoverRecord, RadioSample, Sample, TripData, TripMeta};

/// A row that was not imported, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRow {
    /// File.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for BadRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
    }
}

/// What an import produced besides the trips.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Files read.
    pub files: usize,
    /// Data rows read.
    pub rows: usize,
    /// Rows not imported.
    pub bad: Vec<BadRow>,
    /// Notes: choices the importer made that change what the data means (counted).
    pub notes: Vec<String>,
    /// Context logs read, as absolute paths with their size then (`--ride-log` only): what
    /// `linkdb import --past-days` marks imported once the rides are stored.
    pub logs_read: Vec<(std::path::PathBuf, u64)>,
}

impl ImportReport {
    pub(crate) fn bad(&mut self, file: &Path, line: usize, reason: impl Into<String>) {
        self.bad.push(BadRow {
            file: file.to_path_buf(),
            line,
            reason: reason.into(),
        });
    }

    /// Merge another report into this one.
    pub fn merge(&mut self, o: ImportReport) {
        self.files += o.files;
        self.rows += o.rows;
        self.bad.extend(o.bad);
        self.notes.extend(o.notes);
        self.logs_read.extend(o.logs_read);
    }

    /// Human summary: counts, then at most `max_bad` bad rows with file:line.
    pub fn summary(&self, max_bad: usize) -> String {
        let mut s = format!(
            "{} files, {} rows read, {} bad rows",
            self.files,
            self.rows,
            self.bad.len()
        );
        for n in &self.notes {
            s.push_str("\nnote: ");
            s.push_str(n);
        }
        for b in self.bad.iter().take(max_bad) {
            s.push_str("\nbad row: ");
            s.push_str(&b.to_string());
        }
        if self.bad.len() > max_bad {
            s.push_str(&format!(
                "\n… and {} more bad rows",
                self.bad.len() - max_bad
            ));
        }
        s
    }
}

/// Errors that stop an import of one file or directory.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is unusable as a whole.
    #[error("{path}:{line}: {problem}")]
    Format {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 = header).
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// The trip model rejected its configuration.
    #[error("trip model: {0}")]
    Trip(#[from] polycorn_link::trip::TripError),
}

pub(crate) fn read(path: &Path) -> Result<String, ImportError> {
    std::fs::read_to_string(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A CSV file read whole: its header, then its data rows ([`Csv::rows`]).
pub(crate) struct Csv<'a> {
    file: &'a Path,
    text: String,
    header: Header,
}

impl<'a> Csv<'a> {
    /// Read `file`; one without a header line is an error naming it.
    pub(crate) fn read(file: &'a Path) -> Result<Csv<'a>, ImportError> {
        let text = read(file)?;
        let first = text.lines().next().ok_or_else(|| ImportError::Format {
            path: file.to_path_buf(),
            line: 1,
            problem: "empty file".into(),
        })?;
        let header = Header::parse(first);
        Ok(Csv { file, text, header })
    }

    /// The index of column `name`; a header without it is an error naming the file.
    pub(crate) fn col(&self, name: &str) -> Result<usize, ImportError> {
        self.header.col(self.file, name)
    }

    /// The header's column names, in order.
    pub(crate) fn columns(&self) -> &[String] {
        &self.header.cols
    }

    /// Each data row, split on commas and trimmed, through `row`. Blank lines are skipped;
    /// every other row is counted as read. A row whose field count is not the header's, or
    /// that `row` refuses (`Err(reason)`), is reported as bad with file:line and the reason,
    /// and left out; the import goes on.
    pub(crate) fn rows(
        &self,
        rep: &mut ImportReport,
        mut row: impl FnMut(&[&str]) -> Result<(), String>,
    ) {
        let width = self.header.cols.len();
        for (i, line) in self.text.lines().enumerate().skip(1) {
            let lineno = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            rep.rows += 1;
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let checked = if f.len() == width {
                row(&f)
            } else {
                Err(format!("{} fields, header has {width}", f.len()))
            };
            if let Err(reason) = checked {
                rep.bad(self.file, lineno, reason);
            }
        }
    }
}

/// A CSV header: trimmed column names and lookup by name.
struct Header {
    cols: Vec<String>,
}

impl Header {
    fn parse(line: &str) -> Header {
        Header {
            cols: line
                .trim_start_matches('\u{feff}')
                .split(',')
                .map(|c| c.trim().to_string())
                .collect(),
        }
    }
    fn col(&self, path: &Path, name: &str) -> Result<usize, ImportError> {
        self.cols
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| ImportError::Format {
                path: path.to_path_buf(),
                line: 1,
                problem: format!("no `{name}` column in the header"),
            })
    }
}

/// A trip of `meta` with its records, sorted and keyed ([`TripData::seal`]).
pub(crate) fn sealed(
    meta: TripMeta,
    handovers: Vec<HandoverRecord>,
    samples: Vec<Sample>,
    radio: Vec<RadioSample>,
) -> TripData {
    let mut data = TripData {
        meta,
        handovers,
        samples,
        radio,
    };
    data.seal();
    data
}

/// Files to import under `path`: the file itself, or the `.csv` files of a directory tree,
/// sorted (so imports are deterministic).
pub fn csv_files(path: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let io = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).map_err(|source| ImportError::Io {
            path: dir.clone(),
            source,
        })? {
            let p = e
                .map_err(|source| ImportError::Io {
                    path: dir.clone(),
                    source,
                })?
                .path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("csv")) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// All trips of an import plus its report.
pub type Imported = (Vec<TripData>, ImportReport);
