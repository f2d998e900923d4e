use lockattr::LockKey;

#[derive(LockKey)]
enum Shape {
    Circle,
    Square,
}

fn main() {}
