import Foundation
import Testing
@testable import SocketTLS

/// The TLS fuzz target's properties in the ordinary test run: every seed of Fuzz/corpus/tls and
/// every input that ever broke the target (Fuzz/regressions/tls), plus generated inputs.
@Suite("TLS fuzzer findings and seeds")
struct TLSFuzzRegressionTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The files of Fuzz/<directory>/tls, or none if it does not exist.
    static func inputs(_ directory: String) -> [URL] {
        let url = root.appendingPathComponent("Fuzz/\(directory)/tls")
        let files = (try? FileManager.default.contentsOfDirectory(at: url, includingPropertiesForKeys: nil)) ?? []
        return files.filter { !$0.lastPathComponent.hasPrefix(".") }.sorted { $0.path < $1.path }
    }

    @Test func seedsAreThere() {
        #expect(Self.inputs("corpus").count >= 6, "Fuzz/corpus/tls holds the seeds")
    }

    @Test func everyRegressionAndSeedKeepsTheProperties() throws {
        for file in Self.inputs("regressions") + Self.inputs("corpus") {
            let violation = TLSFuzzProperties.check([UInt8](try Data(contentsOf: file)))
            #expect(violation == nil, "\(file.lastPathComponent): \(violation ?? "")")
        }
    }

    @Test func conversationsFromGeneratedSchedulesKeepTheProperties() {
        for seed in UInt32(1)...60 {
            let input = [0x80] + patternBytes(40 + Int(seed) * 3, seed: seed)
            let violation = TLSFuzzProperties.check(input)
            #expect(violation == nil, "seed \(seed): \(violation ?? "")")
        }
    }

    @Test func aRealClientHelloCutShortOrBentKeepsTheHostileProperties() throws {
        let fixture = TLSFixture()
        let hello = Array(try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "x").pendingCiphertext)
        for end in stride(from: 0, through: hello.count, by: 17) {
            let violation = TLSFuzzProperties.check([0] + hello[..<end])
            #expect(violation == nil, "first \(end) bytes: \(violation ?? "")")
        }
        for position in stride(from: 0, to: hello.count, by: 13) {
            var bent = hello
            bent[position] ^= 0x5A
            let violation = TLSFuzzProperties.check([0] + bent)
            #expect(violation == nil, "byte \(position) bent: \(violation ?? "")")
        }
    }
}
