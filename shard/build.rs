fn main() {
    println!("cargo:rerun-if-changed=src/numbers.c");
    cc::Build::new().file("src/numbers.c").opt_level(2).compile("corekv_numbers");
}
