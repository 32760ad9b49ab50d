fn main() {
    // --- sandbox launcher (branch `builtin`) -------------------------------------------
    // Must run before any runtime or thread starts: the launcher restricts this process
    // (user/network namespace, Landlock, rlimits) and then execs the sandboxed command.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == norma::sandbox::launcher::SUBCOMMAND)
    {
        norma::sandbox::launcher::main_from_args(args);
    }
    // --- end sandbox launcher ----------------------------------------------------------
    println!("norma");
}
