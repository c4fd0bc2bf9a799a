import Foundation
import Testing

@Suite("RESP fuzzer findings and seeds")
struct RESPFuzzRegressionTests {
    /// Fuzz/<directory>/resp/ of this checkout.
    static func inputs(_ directory: String) -> [URL] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let url = root.appendingPathComponent("Fuzz/\(directory)/resp")
        let files = (try? FileManager.default.contentsOfDirectory(at: url, includingPropertiesForKeys: nil)) ?? []
        return files.filter { !$0.lastPathComponent.hasPrefix(".") }.sorted { $0.path < $1.path }
    }

    @Test func everyRegressionAndSeedKeepsTheParsingProperties() throws {
        let files = Self.inputs("regressions") + Self.inputs("corpus")
        #expect(!files.isEmpty, "the seeds are found")
        for file in files {
            let violation = RESPFuzzProperties.check([UInt8](try Data(contentsOf: file)))
            #expect(violation == nil, "\(file.lastPathComponent): \(violation ?? "")")
        }
    }

    @Test func thePropertiesHoldForEveryPrefixOfAMixedStream() {
        var stream: [UInt8] = []
        for value: RESPValueSample in [.status, .nested, .binary] { stream += value.bytes }
        for end in 0...stream.count {
            let violation = RESPFuzzProperties.check(Array(stream[..<end]))
            #expect(violation == nil, "prefix of \(end) bytes: \(violation ?? "")")
        }
    }
}

/// A few wire samples for the prefix test.
private enum RESPValueSample {
    case status, nested, binary

    var bytes: [UInt8] {
        switch self {
        case .status: Array("+OK\r\n:-7\r\n".utf8)
        case .nested: Array("*2\r\n*1\r\n$-1\r\n*0\r\n".utf8)
        case .binary: Array("$3\r\n".utf8) + [0, 13, 10] + Array("\r\n".utf8)
        }
    }
}
