/// Where each new room's epoch comes from: a non-zero number that a client compares to tell a
/// room that started again from one it saw before (docs/PROTOCOL.md, `joined`).
///
/// A value the core owns and steps, rather than a closure it calls: the core stays a state
/// machine whose outputs follow from its inputs. The server seeds it from the system's random
/// generator once at start; a test chooses the numbers.
public struct EpochSource: Sendable {
    private enum Sequence: Sendable {
        /// SplitMix64 (Steele, Lea and Flood, 2014) from a random seed: 2^64 distinct outputs
        /// before it repeats, so one server never gives two rooms the same epoch, and seeds
        /// drawn afresh at each start make a restarted server's epochs as unlikely to meet its
        /// old ones as independent random numbers would be.
        case mixed(state: UInt64)
        /// first, first + 1, …: for tests, which compare epochs.
        case counting(next: UInt64)
    }

    private var sequence: Sequence

    /// Epochs from a seed drawn from the system's random generator.
    public static func random() -> EpochSource {
        var generator = SystemRandomNumberGenerator()
        return EpochSource(sequence: .mixed(state: generator.next()))
    }

    /// Epochs `first`, `first + 1`, and so on (`first` must not be 0).
    public static func sequential(from first: UInt64 = 1) -> EpochSource {
        precondition(first != 0, "an epoch is never 0")
        return EpochSource(sequence: .counting(next: first))
    }

    /// The next epoch: never 0.
    public mutating func next() -> UInt64 {
        switch sequence {
        case .counting(let next):
            sequence = .counting(next: next &+ 1 == 0 ? 1 : next &+ 1)
            return next
        case .mixed(var state):
            var epoch: UInt64 = 0
            while epoch == 0 {
                state &+= 0x9E37_79B9_7F4A_7C15
                var mixed = state
                mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
                mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
                epoch = mixed ^ (mixed >> 31)
            }
            sequence = .mixed(state: state)
            return epoch
        }
    }
}
