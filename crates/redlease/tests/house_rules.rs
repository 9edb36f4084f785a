//! House rules of the library's source, checked on every `.rs` file under
//! `src/` (test code left out: `#[cfg(test)]` items and the files of
//! `#[cfg(test)] mod name;`). The Redis protocol stays typed:
//!
//! - no `"0"` or `"1"` string literal: a script's yes/no argument is a
//!   `Flag` (protocol/lua.rs), its reply a typed value;
//! - no `Vec<i64>`: a reply is decoded into a type with named fields, not
//!   read by position;
//! - no `.contains("...")` or `.contains(CONST)`: an error reply is
//!   classified once by its code, and its text read by a grammar
//!   (protocol/server_error.rs), never searched for words.
//!
//! [`ALLOWED`] names the few places where a rule does not apply, each with
//! its reason; an entry that no longer matches anything fails the test
//! too, so the list stays as short as it can be.

use std::fmt;
use std::path::{Path, PathBuf};

/// A house rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// A `"0"` or `"1"` string literal.
    FlagString,
    /// `Vec<i64>`.
    PositionalReply,
    /// `.contains(` with a string literal or a constant.
    TextSearch,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::FlagString => "a \"0\"/\"1\" flag string (use protocol::lua::Flag)",
            Rule::PositionalReply => "Vec<i64> (decode a reply into a typed value)",
            Rule::TextSearch => {
                "substring search of text (classify by code, read text by its grammar)"
            }
        })
    }
}

/// Where a rule does not apply: a file (relative to `src/`), the rule, and
/// why.
const ALLOWED: &[(&str, Rule, &str)] = &[(
    "transport/node_url.rs",
    Rule::TextSearch,
    "URL text, not a server's reply: whether a comma-separated list names a cluster or \
     Sentinel scheme, and whether a query parameter's name is a password's",
)];

#[test]
fn the_library_keeps_its_protocol_typed() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 20, "found only {files:?}");
    let excluded: Vec<PathBuf> = files
        .iter()
        .flat_map(|file| test_module_files(file, &std::fs::read_to_string(file).unwrap()))
        .collect();
    let mut found = Vec::new();
    let mut used = vec![false; ALLOWED.len()];
    for file in files.iter().filter(|f| !excluded.contains(f)) {
        let name = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(file).unwrap();
        for (line, rule) in violations(&text) {
            match ALLOWED
                .iter()
                .position(|(f, r, _)| *f == name && *r == rule)
            {
                Some(k) => used[k] = true,
                None => found.push(format!("src/{name}:{line}: {rule}")),
            }
        }
    }
    let stale: Vec<_> = ALLOWED
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((file, rule, _), _)| format!("{file}: {rule:?}"))
        .collect();
    assert!(
        found.is_empty(),
        "house rules broken:\n{}",
        found.join("\n")
    );
    assert!(stale.is_empty(), "allowed but no longer needed: {stale:?}");
}

#[test]
fn the_rules_catch_what_they_name_and_only_in_library_code() {
    let planted = r###"
//! Docs may say "1" and Vec<i64> and .contains("x").
fn flags(on: bool) -> &'static str {
    if on { "1" } else { "0" }                       // line 4: two flag strings
}
fn reply(v: Vec<i64>) {}                             // line 6
fn search(e: &str) -> bool {
    e.contains("READONLY") || e.contains(REDIS_7_0)  // line 8: two searches
}
const S: &str = "a \"1\" inside, and r#\"0\"# too";
const R: &str = r#"Vec<i64> .contains("x") "1""#;
fn fine(set: &std::collections::HashSet<u8>, b: u8, c: char) -> bool {
    let _ = ['"', '{', '\'', '\\'];
    let _: &'static str = "}";
    set.contains(&b) || "abc".contains(c) || (1..3).contains(&2)
}
/* A block comment: "0" Vec<i64> .contains("x") */
#[cfg(test)]
mod tests {
    fn helper() -> &'static str { "1" }
    #[test]
    fn t() { assert!("x".contains("x")); let _: Vec<i64> = vec![]; }
}
#[cfg(test)]
const T: [&str; 2] = ["0", "1"];
fn after() -> &'static str { b"1"; "1" }             // line 26: two
"###;
    let found = violations(planted);
    assert_eq!(
        found,
        [
            (4, Rule::FlagString),
            (4, Rule::FlagString),
            (6, Rule::PositionalReply),
            (8, Rule::TextSearch),
            (8, Rule::TextSearch),
            (26, Rule::FlagString),
            (26, Rule::FlagString),
        ]
    );
    assert_eq!(
        test_module_files(
            Path::new("/x/coord/renew/mod.rs"),
            "#[cfg(test)]\nmod tests;\n"
        ),
        [PathBuf::from("/x/coord/renew/tests.rs")]
    );
    assert_eq!(
        test_module_files(Path::new("/x/core/keys.rs"), "#[cfg(test)] mod proofs;"),
        [PathBuf::from("/x/core/keys/proofs.rs")]
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of the test-only modules `file` declares (`#[cfg(test)] mod
/// name;`).
fn test_module_files(file: &Path, text: &str) -> Vec<PathBuf> {
    let source = Source::lex(text);
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().unwrap().to_path_buf(),
        _ => file.with_extension(""),
    };
    source
        .test_items()
        .into_iter()
        .filter_map(|(start, end)| {
            let item: String = source.code[start..end].iter().collect();
            let item = item.split_whitespace().collect::<Vec<_>>().join(" ");
            let name = item.strip_suffix(';')?.rsplit_once("mod ")?.1.trim();
            Some(dir.join(format!("{name}.rs")))
        })
        .collect()
}

/// The lines of `text` that break a rule, in order.
fn violations(text: &str) -> Vec<(usize, Rule)> {
    let mut source = Source::lex(text);
    for (start, end) in source.test_items() {
        source.blank(start, end);
    }
    let line_of = |at: usize| 1 + source.code[..at].iter().filter(|&&c| c == '\n').count();
    let mut found = Vec::new();
    for literal in &source.strings {
        if !literal.blanked && matches!(literal.content.as_str(), "0" | "1") {
            found.push((line_of(literal.at), Rule::FlagString));
        }
    }
    let code = &source.code;
    let at = |i: usize, word: &str| {
        word.chars()
            .enumerate()
            .all(|(k, c)| code.get(i + k) == Some(&c))
    };
    for i in 0..code.len() {
        if at(i, "Vec") && !ident(code.get(i.wrapping_sub(1)).copied()) {
            let rest: String = code[i + 3..]
                .iter()
                .take(16)
                .filter(|c| !c.is_whitespace())
                .collect();
            if rest.starts_with("<i64>") {
                found.push((line_of(i), Rule::PositionalReply));
            }
        }
        if at(i, ".contains(") {
            let mut k = i + ".contains(".len();
            while code.get(k).is_some_and(|c| c.is_whitespace()) {
                k += 1;
            }
            let literal = matches!(
                (code.get(k), code.get(k + 1)),
                (Some('"'), _) | (Some('r' | 'b'), Some('"' | '#' | 'r'))
            );
            let constant: String = code[k..].iter().take_while(|&&c| ident(Some(c))).collect();
            let constant = constant.len() >= 2
                && constant.starts_with(|c: char| c.is_ascii_uppercase())
                && constant
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if literal || constant {
                found.push((line_of(i), Rule::TextSearch));
            }
        }
    }
    found.sort_by_key(|(line, _)| *line);
    found
}

fn ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// A string literal of the source: where it starts, and its text.
struct Literal {
    at: usize,
    content: String,
    blanked: bool,
}

/// A source file with its comments blanked and its literals' contents
/// blanked in `code` (kept in `strings`), so that what is left is code.
/// Every character keeps its place, so lines count as in the file.
struct Source {
    code: Vec<char>,
    strings: Vec<Literal>,
}

impl Source {
    fn lex(text: &str) -> Source {
        let chars: Vec<char> = text.chars().collect();
        let mut code = chars.clone();
        let mut strings = Vec::new();
        let blank = |code: &mut Vec<char>, from: usize, to: usize| {
            for c in &mut code[from..to.min(chars.len())] {
                if *c != '\n' {
                    *c = ' ';
                }
            }
        };
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            let prev = i.checked_sub(1).map(|p| chars[p]);
            if c == '/' && next == Some('/') {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |n| i + n);
                blank(&mut code, i, end);
                i = end;
            } else if c == '/' && next == Some('*') {
                let (mut depth, mut k) = (1, i + 2);
                while k < chars.len() && depth > 0 {
                    match (chars[k], chars.get(k + 1)) {
                        ('/', Some('*')) => (depth, k) = (depth + 1, k + 2),
                        ('*', Some('/')) => (depth, k) = (depth - 1, k + 2),
                        _ => k += 1,
                    }
                }
                blank(&mut code, i, k);
                i = k;
            } else if c == 'r'
                && matches!(next, Some('"' | '#'))
                && (!ident(prev)
                    || (prev == Some('b') && !ident(i.checked_sub(2).map(|p| chars[p]))))
            {
                let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
                let open = i + 1 + hashes;
                if chars.get(open) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let close: Vec<char> = close.chars().collect();
                let mut k = open + 1;
                while k < chars.len() && !chars[k..].starts_with(&close) {
                    k += 1;
                }
                strings.push(Literal {
                    at: i,
                    content: chars[open + 1..k].iter().collect(),
                    blanked: false,
                });
                blank(&mut code, open + 1, k);
                i = k + close.len();
            } else if c == '"' {
                let mut k = i + 1;
                let mut content = String::new();
                while k < chars.len() && chars[k] != '"' {
                    if chars[k] == '\\' {
                        content.push(chars[k]);
                        k += 1;
                    }
                    if let Some(&c) = chars.get(k) {
                        content.push(c);
                    }
                    k += 1;
                }
                strings.push(Literal {
                    at: i,
                    content,
                    blanked: false,
                });
                blank(&mut code, i + 1, k);
                i = k + 1;
            } else if c == '\'' {
                // A char literal ('x', '\n', '\''), or a lifetime ('a).
                let end = match next {
                    Some('\\') => chars[i + 2..]
                        .iter()
                        .skip(1)
                        .position(|&c| c == '\'')
                        .map(|n| i + 3 + n),
                    Some(_) if chars.get(i + 2) == Some(&'\'') => Some(i + 2),
                    _ => None,
                };
                match end {
                    Some(end) => {
                        blank(&mut code, i + 1, end);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            } else {
                i += 1;
            }
        }
        Source { code, strings }
    }

    /// The spans of the items marked `#[cfg(test)]`.
    fn test_items(&self) -> Vec<(usize, usize)> {
        let code = &self.code;
        let text: String = code.iter().collect();
        let mut items = Vec::new();
        let mut from = 0;
        while let Some(found) = text[from..].find("#[cfg(test)]") {
            // `find` counts bytes: the code is blanked to ASCII around
            // attributes, but count chars to be safe.
            let start = text[..from + found].chars().count();
            let mut k = start + "#[cfg(test)]".len();
            // Further attributes.
            loop {
                while code.get(k).is_some_and(|c| c.is_whitespace()) {
                    k += 1;
                }
                if code.get(k) == Some(&'#') {
                    k = close(code, k + 1, '[', ']');
                } else {
                    break;
                }
            }
            let keyword: String = code[k..]
                .iter()
                .collect::<String>()
                .split_whitespace()
                .find(|w| !w.starts_with("pub"))
                .unwrap_or_default()
                .to_string();
            let braced_item = [
                "mod", "fn", "impl", "struct", "enum", "trait", "async", "unsafe",
            ]
            .contains(&keyword.as_str());
            let (mut depth, mut end) = (0i32, k);
            while end < code.len() {
                match code[end] {
                    '(' | '[' => depth += 1,
                    ')' | ']' => depth -= 1,
                    ';' if depth == 0 => {
                        end += 1;
                        break;
                    }
                    '{' if depth == 0 => {
                        end = close(code, end, '{', '}');
                        if braced_item {
                            break;
                        }
                        continue;
                    }
                    _ => {}
                }
                end += 1;
            }
            items.push((start, end.min(code.len())));
            let byte_end: usize = code[..end.min(code.len())]
                .iter()
                .map(|c| c.len_utf8())
                .sum();
            from = byte_end.max(from + found + 1);
        }
        items
    }

    /// Leaves out `start..end`: its code and its literals.
    fn blank(&mut self, start: usize, end: usize) {
        for c in &mut self.code[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        for literal in &mut self.strings {
            if (start..end).contains(&literal.at) {
                literal.blanked = true;
            }
        }
    }
}

/// The position after the bracket that closes the one at `open` (or at
/// the first `left` from there).
fn close(code: &[char], open: usize, left: char, right: char) -> usize {
    let mut depth = 0;
    let mut k = open;
    while k < code.len() {
        if code[k] == left {
            depth += 1;
        } else if code[k] == right {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
        k += 1;
    }
    code.len()
}
