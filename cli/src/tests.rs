use clap::Parser as _;

use super::*;

#[test]
fn the_command_line_parses_as_documented() {
    let cli = Cli::try_parse_from(["nave", "explain", "web", "-n", "shop", "-o", "json"]).unwrap();
    assert_eq!(cli.global.output, Format::Json);
    assert!(
        matches!(cli.command, Command::Explain { ref name, namespace: Some(ref n) } if name == "web" && n == "shop")
    );
    let error = Cli::try_parse_from(["nave", "join", "eu-1", "--ttl", "0s"]).unwrap_err();
    assert!(error.to_string().contains("greater than zero"), "{error}");
    assert_eq!(
        error.exit_code(),
        i32::from(ExitKind::Invalid.code()),
        "usage errors exit 2, as clap's"
    );
}

#[test]
fn tables_align_columns_and_trim_trailing_space() {
    let text = output::table(
        &["NAME", "READY"],
        &[
            vec!["a-long-name".into(), "True".into()],
            vec!["b".into(), "".into()],
        ],
    );
    assert_eq!(text, "NAME         READY\na-long-name  True\nb\n");
}
