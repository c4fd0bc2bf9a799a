import ChatProtocol
import Foundation
import Testing

@Suite("Fuzzer findings and seeds")
struct FuzzRegressionTests {
    /// The files of Fuzz/<directory>/<target>/, or none if it does not exist.
    static func inputs(_ directory: String, _ target: String) -> [URL] {
        let url = ProtocolDocument.root.appendingPathComponent("Fuzz/\(directory)/\(target)")
        let files = (try? FileManager.default.contentsOfDirectory(at: url, includingPropertiesForKeys: nil)) ?? []
        return files.filter { !$0.lastPathComponent.hasPrefix(".") }.sorted { $0.path < $1.path }
    }

    @Test func everyDecodeRegressionAndSeedKeepsTheDecodingProperties() throws {
        for file in Self.inputs("regressions", "decode") + Self.inputs("corpus", "decode") {
            let violation = FuzzProperties.checkDecoding([UInt8](try Data(contentsOf: file)))
            #expect(violation == nil, "\(file.lastPathComponent): \(violation ?? "")")
        }
    }

    @Test func everyRoundTripRegressionAndSeedStillRoundTrips() throws {
        for file in Self.inputs("regressions", "roundtrip") + Self.inputs("corpus", "roundtrip") {
            let violation = FuzzProperties.checkRoundTrip([UInt8](try Data(contentsOf: file)))
            #expect(violation == nil, "\(file.lastPathComponent): \(violation ?? "")")
        }
    }

    @Test func decodingPropertiesHoldForTheSampleStreamAndItsPrefixes() {
        let stream = ChunkingTests.stream
        for end in stride(from: 0, through: stream.count, by: 7) {
            let violation = FuzzProperties.checkDecoding(Array(stream[..<end]))
            #expect(violation == nil, "prefix of \(end) bytes: \(violation ?? "")")
        }
    }
}
