import Foundation
import Testing

@Suite("ChatCore fuzzer findings and seeds")
struct ChatCoreFuzzRegressionTests {
    /// Fuzz/<directory>/chatcore/ of this checkout.
    static func inputs(_ directory: String) -> [URL] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let url = root.appendingPathComponent("Fuzz/\(directory)/chatcore")
        let files = (try? FileManager.default.contentsOfDirectory(at: url, includingPropertiesForKeys: nil)) ?? []
        return files.filter { !$0.lastPathComponent.hasPrefix(".") }.sorted { $0.path < $1.path }
    }

    @Test func everyRegressionAndSeedKeepsTheCoreInvariants() throws {
        let files = Self.inputs("regressions") + Self.inputs("corpus")
        #expect(!files.isEmpty, "the seeds are found")
        for file in files {
            let violation = ChatCoreFuzzProperties.check([UInt8](try Data(contentsOf: file)))
            #expect(violation == nil, "\(file.lastPathComponent): \(violation ?? "")")
        }
    }

    @Test func everySeedRunsOnEveryBackend() throws {
        // Bit 5 of the first byte makes the core a cluster node, else bit 0 picks the store: the
        // seeds come in threes, one for each.
        let setups = try Self.inputs("corpus").compactMap { try Data(contentsOf: $0).first }
        #expect(setups.contains { $0 & 0x21 == 0 }, "a seed runs on the memory store")
        #expect(setups.contains { $0 & 0x21 == 1 }, "a seed runs on SQLite")
        #expect(setups.contains { $0 & 0x20 != 0 }, "a seed runs on a cluster node")
    }
}
