@testable import ChatCore
import ChatProtocol
import Testing

/// New rooms' epochs: never 0 (a client reads 0 as "no epoch"), never the same twice from one
/// source, and a restarted server's unlike its old ones.
@Suite("Epochs of new rooms")
struct EpochSourceTests {
    @Test func aRandomSourceGivesNoEpochTwiceAndNeverZero() {
        var epochs = EpochSource.random()
        var seen = Set<UInt64>()
        for _ in 0..<100_000 { seen.insert(epochs.next()) }
        #expect(seen.count == 100_000, "\(100_000 - seen.count) epochs came twice")
        #expect(!seen.contains(0))
    }

    @Test func twoStartsDrawTwoSequences() {
        var first = EpochSource.random()
        var second = EpochSource.random()
        let firsts = Set((0..<1_000).map { _ in first.next() })
        let seconds = Set((0..<1_000).map { _ in second.next() })
        #expect(firsts.isDisjoint(with: seconds), "a restarted server would reuse its old epochs")
    }

    @Test func aSequentialSourceCountsAndSkipsZeroWhenItWraps() {
        var epochs = EpochSource.sequential(from: UInt64.max - 1)
        #expect((0..<4).map { _ in epochs.next() } == [UInt64.max - 1, UInt64.max, 1, 2])
    }

    @Test func aCoreGivesEachNewRoomTheNextEpochAndHandsItsSourceOn() {
        var core = ChatCore(limits: ChatLimits(), budget: MemoryBudget(total: 64 << 20, maxClients: 4, maxFrameSize: 4096), epochs: .sequential(from: 7))
        core.makeRoom("a", from: nil)
        core.makeRoom("b", from: nil)
        core.makeRoom("a", from: nil)
        #expect(core.rooms["a"]?.epoch == 7 && core.rooms["b"]?.epoch == 8, "\(core.rooms.mapValues(\.epoch))")
        var restarted = ChatCore(limits: ChatLimits(), budget: MemoryBudget(total: 64 << 20, maxClients: 4, maxFrameSize: 4096), epochs: core.epochs)
        restarted.makeRoom("a", from: nil)
        #expect(restarted.rooms["a"]?.epoch == 9, "a restarted core goes on from the old one's epochs")
    }
}
