import ChatProtocol
import Foundation
import Testing

/// docs/PROTOCOL.md, read once: its hex examples and its text.
struct ProtocolDocument {
    /// One ```hex block: its name, the line before its fence, and its bytes.
    struct Example {
        var name: String
        var caption: String
        var bytes: [UInt8]
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    static let shared = try! ProtocolDocument(url: root.appendingPathComponent("docs/PROTOCOL.md"))

    var text: String
    var examples: [Example] = []

    /// Reads the document and parses its ```hex blocks: hex byte pairs, `#` starts a comment.
    init(url: URL) throws {
        text = try String(contentsOf: url, encoding: .utf8)
        var current: Example?
        var lastTextLine = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line.hasPrefix("```hex ") {
                current = Example(name: String(line.dropFirst(7)).trimmingCharacters(in: .whitespaces), caption: lastTextLine, bytes: [])
            } else if let example = current, line == "```" {
                examples.append(example)
                current = nil
            } else if current != nil {
                let digits = line.prefix { $0 != "#" }.filter { !$0.isWhitespace }
                var index = digits.startIndex
                while index < digits.endIndex {
                    let next = digits.index(index, offsetBy: 2, limitedBy: digits.endIndex) ?? digits.endIndex
                    guard let byte = UInt8(digits[index..<next], radix: 16), next != index else {
                        throw ParseError(line: String(line))
                    }
                    current!.bytes.append(byte)
                    index = next
                }
            } else if !line.trimmingCharacters(in: .whitespaces).isEmpty {
                lastTextLine = String(line)
            }
        }
    }

    struct ParseError: Error {
        var line: String
    }
}

@Suite("docs/PROTOCOL.md agrees with the code")
struct ProtocolDocumentTests {
    let document = ProtocolDocument.shared

    @Test func everyExampleIsKnownToTheTests() {
        let names = Set(document.examples.map(\.name))
        let expected = Set(SampleFrames.documented.keys).union(SampleFrames.documentedErrors.keys)
        #expect(names == expected, "examples in the document vs. the tests' table")
        #expect(document.examples.count == names.count, "example names must be unique")
    }

    @Test func examplesDecodeToTheirFramesAndReencodeByteForByte() throws {
        for example in document.examples {
            guard let expected = SampleFrames.documented[example.name] else { continue }
            let decoded = try Frame(decoding: example.bytes)
            #expect(decoded == expected, "example \(example.name)")
            #expect(FrameEncoder.encode(expected) == example.bytes, "example \(example.name) is not what the encoder writes")
            #expect(example.caption.hasSuffix("— \(example.bytes.count) bytes"), "caption of \(example.name): \(example.caption)")
        }
    }

    @Test func malformedExamplesFailWithTheirDocumentedError() {
        for example in document.examples {
            guard let expected = SampleFrames.documentedErrors[example.name] else { continue }
            #expect(decodingError(example.bytes, limit: 16_384) == expected, "example \(example.name)")
        }
    }

    @Test func everyFrameTypeHasAnExample() {
        let types = Set(document.examples.compactMap { SampleFrames.documented[$0.name]?.type })
        for type in FrameType.allKnown {
            #expect(types.contains(type), "no example of \(type)")
        }
    }

    @Test func referenceTablesListEveryFrameTypeAndErrorCode() {
        for type in FrameType.allKnown {
            let hex = String(type.rawValue, radix: 16)
            let row = "| `\(hex.count == 1 ? "0" + hex : hex)` | `\(type.name!)` |"
            #expect(document.text.contains(row), "frame reference lacks \(row)")
        }
        for code in ErrorCode.allKnown {
            #expect(document.text.contains("| \(code.rawValue) | `\(code.name!)` |"), "error table lacks \(code)")
        }
    }

    @Test func theVersionThatIntroducedEachTypeIsTheDocumentsAndUnknownTypesHaveNone() {
        for type in FrameType.allKnown {
            // "### fetchHistory (0x0C, C→S, v2)", "### login (0x0F, C→S, v3)", or "### ping (0x40, both) and pong (0x41, both)".
            let heading = document.text.split(separator: "\n").lazy.filter { $0.hasPrefix("### ") }
                .compactMap { line in line.range(of: "\(type.name!) (0x").map { line[$0.upperBound...] } }.first
            let inParentheses = heading?.prefix { $0 != ")" }
            let documented = inParentheses.flatMap { $0.hasSuffix(")") ? nil : $0.split(separator: ", v").dropFirst().last.flatMap { UInt16($0) } } ?? 1
            #expect(heading != nil, "no section for \(type)")
            #expect(type.introducedIn == documented, "\(type) is version \(documented) in docs/PROTOCOL.md")
        }
        let known = Set(FrameType.allKnown.map(\.rawValue))
        for byte in UInt8.min...UInt8.max where !known.contains(byte) {
            #expect(FrameType(rawValue: byte).introducedIn == nil, "\(FrameType(rawValue: byte)) is no version's")
        }
    }

    @Test func fuzzSeedCorpusHoldsTheExamples() throws {
        let directory = ProtocolDocument.root.appendingPathComponent("Fuzz/corpus/decode")
        for example in document.examples {
            let seed = try Data(contentsOf: directory.appendingPathComponent("spec-\(example.name).bin"))
            #expect([UInt8](seed) == example.bytes, "Fuzz/corpus/decode/spec-\(example.name).bin; run Scripts/fuzz.sh --refresh-seeds")
        }
    }
}
