fn main() {
    let path = std::env::args().nth(1).unwrap();
    match dataplane::config::load_file(std::path::Path::new(&path)) {
        Ok(l) => {
            for w in l.warnings {
                println!("{w}");
            }
            println!("OK {:?}", l.config.engine);
        }
        Err(e) => print!("{e}"),
    }
}
