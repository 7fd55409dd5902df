//! Every C entry point of the library — exported by symbol, or installed
//! as a function pointer the program calls (`ibv_qp_ex`'s `wr_*`) — has a
//! `# Safety` section naming its contract (clippy's `missing_safety_doc`
//! does not see them: they live in private modules).

use std::path::Path;

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_exported_function_has_a_safety_section() {
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let (mut checked, mut missing) = (0, Vec::new());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            // Exported by symbol (`pub`), or reached by the program
            // through a function pointer we installed (`ibv_qp_ex`'s
            // `wr_*`): C entry points both.
            let t = t.strip_prefix("pub ").unwrap_or(t);
            if !t.starts_with("unsafe extern \"C\" fn ")
                && !t.starts_with("unsafe extern \"C-unwind\" fn ")
            {
                continue;
            }
            checked += 1;
            let doc = lines[..i]
                .iter()
                .rev()
                .skip_while(|d| d.trim_start().starts_with("#["))
                .take_while(|d| d.trim_start().starts_with("///"));
            if !doc.into_iter().any(|d| d.contains("# Safety")) {
                missing.push(format!("{}:{}", f.display(), i + 1));
            }
        }
    }
    assert!(checked > 100, "found only {checked} exported functions");
    assert!(missing.is_empty(), "no # Safety section: {missing:#?}");
}
