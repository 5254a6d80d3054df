//! RESP2, the Redis protocol: a bounded parser and an encoder.
//!
//! Every length is checked before anything is allocated: bulk strings over
//! [`MAX_BULK`], arrays over [`MAX_ARGS`] elements, header or inline lines
//! over [`MAX_LINE`] are protocol errors (the server answers with an error
//! and closes the connection, as Redis does).

/// Longest bulk string accepted (a 1 MiB value plus room).
pub const MAX_BULK: usize = (1 << 20) + 1024;
/// Most elements in one array.
pub const MAX_ARGS: usize = 1024;
/// Longest header line or inline command.
pub const MAX_LINE: usize = 64 * 1024;
/// Deepest nesting of arrays (replies only; requests are flat).
const MAX_DEPTH: usize = 4;

/// A RESP value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `+text`.
    Simple(String),
    /// `-text`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` followed by bytes.
    Bulk(Vec<u8>),
    /// `$-1` (or `*-1`).
    Nil,
    /// `*n` followed by n values.
    Array(Vec<Value>),
}

impl Value {
    /// Append the encoding of `self` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(clean(s).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Value::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(clean(s).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Value::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Value::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::Array(vs) => {
                out.extend_from_slice(format!("*{}\r\n", vs.len()).as_bytes());
                for v in vs {
                    v.encode(out);
                }
            }
        }
    }

    /// The encoding of `self`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

fn clean(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// A protocol error: the text of the `-ERR` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

fn find_line(buf: &[u8], from: usize) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[from..buf.len().min(from + MAX_LINE + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(p) => Ok(Some(from + p)),
        None if window.len() >= MAX_LINE + 2 => Err(ProtocolError("line too long".into())),
        None => Ok(None),
    }
}

fn parse_len(line: &[u8], what: &str) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ProtocolError(format!("invalid {what} length")))
}

/// Parse one value from the start of `buf`: `Ok(None)` when more bytes are
/// needed, else the value and the bytes it took.
pub fn parse_value(buf: &[u8]) -> Result<Option<(Value, usize)>, ProtocolError> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> Result<Option<(Value, usize)>, ProtocolError> {
    if pos >= buf.len() {
        return Ok(None);
    }
    let Some(eol) = find_line(buf, pos + 1)? else {
        return Ok(None);
    };
    let line = &buf[pos + 1..eol];
    let next = eol + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    match buf[pos] {
        b'+' => Ok(Some((Value::Simple(text()), next))),
        b'-' => Ok(Some((Value::Error(text()), next))),
        b':' => Ok(Some((Value::Int(parse_len(line, "integer")?), next))),
        b'$' => {
            let n = parse_len(line, "bulk")?;
            if n == -1 {
                return Ok(Some((Value::Nil, next)));
            }
            if n < 0 || n as usize > MAX_BULK {
                return Err(ProtocolError(format!(
                    "invalid bulk length (cap {MAX_BULK} bytes)"
                )));
            }
            let n = n as usize;
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not followed by CRLF".into()));
            }
            Ok(Some((
                Value::Bulk(buf[next..next + n].to_vec()),
                next + n + 2,
            )))
        }
        b'*' => {
            let n = parse_len(line, "multibulk")?;
            if n == -1 {
                return Ok(Some((Value::Nil, next)));
            }
            if n < 0 || n as usize > MAX_ARGS {
                return Err(ProtocolError(format!(
                    "invalid multibulk length (cap {MAX_ARGS})"
                )));
            }
            if depth >= MAX_DEPTH {
                return Err(ProtocolError("arrays nested too deep".into()));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut at = next;
            for _ in 0..n {
                match parse_at(buf, at, depth + 1)? {
                    Some((v, end)) => {
                        items.push(v);
                        at = end;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Value::Array(items), at)))
        }
        c => Err(ProtocolError(format!(
            "unexpected byte {:?} at the start of a value",
            c as char
        ))),
    }
}

/// A command's arguments, the name first.
pub type Args = Vec<Vec<u8>>;

/// Parse one client command (an array of bulk strings, or an inline line)
/// from the start of `buf`: `Ok(None)` when more bytes are needed.
pub fn parse_command(buf: &[u8]) -> Result<Option<(Args, usize)>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        // Inline command: one line split on blanks.
        let Some(eol) = find_line(buf, 0)? else {
            return Ok(None);
        };
        let args = buf[..eol]
            .split(|b| b.is_ascii_whitespace())
            .filter(|a| !a.is_empty())
            .map(<[u8]>::to_vec);
        return Ok(Some((args.collect(), eol + 2)));
    }
    match parse_at(buf, 0, MAX_DEPTH - 1)? {
        None => Ok(None),
        Some((Value::Array(items), used)) => {
            let mut args = Vec::with_capacity(items.len());
            for v in items {
                match v {
                    Value::Bulk(b) => args.push(b),
                    _ => return Err(ProtocolError("expected $, got something else".into())),
                }
            }
            Ok(Some((args, used)))
        }
        Some((Value::Nil, used)) => Ok(Some((Vec::new(), used))),
        Some(_) => Err(ProtocolError("expected an array of bulk strings".into())),
    }
}

/// Encode a command as an array of bulk strings (what clients send).
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    Value::Array(args.iter().map(|a| Value::Bulk(a.to_vec())).collect()).to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_whole_or_wait() {
        let c = command(&[b"SET", b"k", b"v"]);
        assert_eq!(
            parse_command(&c).unwrap(),
            Some((vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()], c.len()))
        );
        for cut in 0..c.len() {
            assert_eq!(
                parse_command(&c[..cut]).unwrap(),
                None,
                "prefix of {cut} bytes"
            );
        }
        assert_eq!(
            parse_command(b"PING  x\r\n").unwrap(),
            Some((vec![b"PING".to_vec(), b"x".to_vec()], 9))
        );
    }

    #[test]
    fn bad_input_is_a_protocol_error() {
        assert!(
            parse_command(b"*1\r\n$99999999999\r\n").is_err(),
            "huge bulk length"
        );
        assert!(parse_command(b"*99999999\r\n").is_err(), "huge array");
        assert!(
            parse_command(b"*1\r\n$-5\r\n").is_err(),
            "negative bulk length"
        );
        assert!(
            parse_command(b"*1\r\n:5\r\n").is_err(),
            "integer in a command"
        );
        assert!(parse_command(b"*x\r\n").is_err(), "non-numeric length");
        assert!(
            parse_command(b"*1\r\n$1\r\nab\r\n").is_err(),
            "bulk longer than said"
        );
        assert!(
            parse_command(&vec![b'a'; MAX_LINE + 10]).is_err(),
            "endless inline line"
        );
        assert!(
            parse_value(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").is_err(),
            "deep nesting"
        );
    }

    #[test]
    fn replies_round_trip() {
        let v = Value::Array(vec![
            Value::Simple("OK".into()),
            Value::Error("ERR x".into()),
            Value::Int(-3),
            Value::Bulk(b"a\r\nb".to_vec()),
            Value::Nil,
        ]);
        let b = v.to_bytes();
        assert_eq!(parse_value(&b).unwrap(), Some((v, b.len())));
    }
}
