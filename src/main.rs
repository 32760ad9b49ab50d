fn main() {
    println!("norma");
}
