//! Command-line parse errors as one line, for the `pmkv` and `pmkv-server`
//! binaries (clap prints several: the error, the missing arguments on
//! their own lines, a usage block).

/// What to do with a clap parse error: help and version print as clap
/// writes them and exit 0; any other error is one `BIN: error:` line on
/// stderr (see [`one_line`]) and exit 2.
pub fn report(e: &clap::Error, bin: &str) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.use_stderr() {
                2
            } else {
                0
            }
        }
        _ => {
            eprintln!("{bin}: error: {}", one_line(e, bin));
            2
        }
    }
}

/// A clap error on one line: its first line, what clap lists below it (the
/// missing arguments), its suggestion, and which `--help` to read.
pub fn one_line(e: &clap::Error, bin: &str) -> String {
    let rendered = e.render().to_string();
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .to_string();
    for l in lines {
        if l.starts_with("Usage:") || l.starts_with("For more information") {
            break;
        }
        if l.starts_with("tip: ") {
            continue;
        }
        out.push(' ');
        out.push_str(l);
    }
    use clap::error::{ContextKind, ContextValue};
    for (kind, value) in e.context() {
        if let (
            ContextKind::SuggestedArg
            | ContextKind::SuggestedSubcommand
            | ContextKind::SuggestedValue,
            ContextValue::String(s),
        ) = (kind, value)
        {
            out.push_str(&format!(" (did you mean '{s}'?)"));
        }
    }
    format!("{out}; see '{bin} --help'")
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "t")]
    struct Cli {
        #[arg(long)]
        dir: String,
        #[arg(long)]
        nodes: Option<u32>,
    }

    #[test]
    fn a_missing_argument_is_named_on_the_line() {
        let e = Cli::try_parse_from(["t"]).unwrap_err();
        let l = one_line(&e, "t");
        assert!(!l.contains('\n'), "{l}");
        assert!(l.contains("--dir <DIR>"), "{l}");
        assert!(l.ends_with("see 't --help'"), "{l}");
    }

    #[test]
    fn a_bad_value_and_a_typo_stay_on_one_line() {
        let e = Cli::try_parse_from(["t", "--dir", "d", "--nodes", "x"]).unwrap_err();
        let l = one_line(&e, "t");
        assert!(!l.contains('\n') && l.contains("'x'"), "{l}");
        let e = Cli::try_parse_from(["t", "--dir", "d", "--nodez", "3"]).unwrap_err();
        let l = one_line(&e, "t");
        assert!(
            !l.contains('\n') && l.contains("did you mean '--nodes'"),
            "{l}"
        );
    }
}
