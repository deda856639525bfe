//! The `shardloop` binary. For now it only reports its version; the shard comes with the loop.

fn main() {
    println!("shardloop {}", env!("CARGO_PKG_VERSION"));
}
