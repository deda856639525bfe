//! Finds the line of a key in TOML text (figment keeps no spans), and the line of a TOML
//! syntax error in the parser's message. Best effort: `None` when unsure.

/// The 1-based line where the dotted `key` is set in `text`: the first line assigning it (or a
/// key inside it), else the line of its nearest enclosing table header.
pub(crate) fn line_of(text: &str, key: &str) -> Option<usize> {
    let wanted: Vec<&str> = key.split('.').collect();
    let mut table: Vec<String> = Vec::new();
    let mut best: Option<(usize, usize)> = None; // (segments matched, line)
    for (index, raw) in text.lines().enumerate() {
        let Some(path) = line_path(raw.trim(), &mut table) else {
            continue;
        };
        if !path.iter().zip(&wanted).all(|(a, b)| a == b) {
            continue;
        }
        if path.len() >= wanted.len() {
            return Some(index + 1); // the key itself, or a key inside it (`x.y = 1` for `x`)
        }
        if best.is_none_or(|(matched, _)| path.len() > matched) {
            best = Some((path.len(), index + 1));
        }
    }
    best.map(|(_, line)| line)
}

/// The full key path a line defines (a table header or `key = value`), updating `table`.
fn line_path(line: &str, table: &mut Vec<String>) -> Option<Vec<String>> {
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    if let Some(header) = line.strip_prefix('[') {
        let header = header.trim_start_matches('[');
        let end = find_unquoted(header, ']')?;
        *table = split_key(&header[..end]);
        return Some(table.clone());
    }
    let equals = find_unquoted(line, '=')?;
    let key = split_key(&line[..equals]);
    if key.is_empty() || key.iter().any(String::is_empty) {
        return None;
    }
    Some(table.iter().cloned().chain(key).collect())
}

/// Byte offset of the first `wanted` outside quotes.
fn find_unquoted(text: &str, wanted: char) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == wanted => return Some(i),
            None => {}
        }
    }
    None
}

/// `a . "b.c" . d` → `["a", "b.c", "d"]`.
fn split_key(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let end = find_unquoted(rest, '.').unwrap_or(rest.len());
        let part = rest[..end].trim().trim_matches(|c| c == '"' || c == '\'');
        parts.push(part.to_owned());
        rest = rest.get(end + 1..).unwrap_or("").trim();
    }
    parts
}

/// Line and description from a TOML parser message of the form
/// `TOML parse error at line 3, column 7` / snippet / `description`.
pub(crate) fn syntax_error(message: &str) -> (Option<usize>, String) {
    let line = message.split_once("at line ").and_then(|(_, rest)| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    });
    let description: Vec<&str> = message
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('|'))
        .collect();
    let description = if description.is_empty() {
        message.lines().collect::<Vec<_>>().join(" ")
    } else {
        description.join("; ")
    };
    (line, description)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
# comment with server.tick = 1
[server]
tick = "8ms"   # the tick
"idle_wait" = "1s"

[world.generate]
items = 5
[network]
listen = [
  "127.0.0.1:2593",
]
[archive]
x.y = 1
"#;

    #[test]
    fn finds_keys_in_tables() {
        assert_eq!(line_of(TEXT, "server.tick"), Some(4));
        assert_eq!(line_of(TEXT, "server.idle_wait"), Some(5));
        assert_eq!(line_of(TEXT, "world.generate.items"), Some(8));
        assert_eq!(line_of(TEXT, "network.listen"), Some(10));
        assert_eq!(line_of(TEXT, "archive.x.y"), Some(14));
        assert_eq!(line_of(TEXT, "archive.x"), Some(14));
    }

    #[test]
    fn falls_back_to_the_table() {
        assert_eq!(line_of(TEXT, "server.probe_host"), Some(3));
        assert_eq!(line_of(TEXT, "world.save_dir"), None);
        assert_eq!(line_of(TEXT, "time.zone"), None);
    }

    #[test]
    fn inline_tables_point_at_their_assignment() {
        let text = "[world]\ngenerate = { items = 5 }\n";
        assert_eq!(line_of(text, "world.generate.items"), Some(2));
    }
}
