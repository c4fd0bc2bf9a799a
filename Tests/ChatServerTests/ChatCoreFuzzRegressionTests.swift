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

    @Test func everySeedRunsOnBothStores() throws {
        // Bit 0 of the first byte picks the store: the seeds come in pairs, one for each.
        let seeds = try Self.inputs("corpus").map { try Data(contentsOf: $0) }
        #expect(seeds.contains { $0.first.map { $0 & 1 == 0 } == true }, "a seed runs on the memory store")
        #expect(seeds.contains { $0.first.map { $0 & 1 == 1 } == true }, "a seed runs on SQLite")
    }
}
