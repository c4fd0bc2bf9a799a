import Foundation
import Testing

/// The chat core's promise, checked on its sources: it imports the wire protocol and the
/// collections package, nothing else. Its target's dependencies keep our other modules out; this
/// keeps out what any target may import (Glibc, Dispatch, Foundation, Synchronization).
@Suite struct ChatCoreImportTests {
    @Test func theCoreImportsOnlyTheProtocolAndCollections() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Sources/ChatCore").standardizedFileURL
        let files = try FileManager.default.contentsOfDirectory(atPath: sources.path).filter { $0.hasSuffix(".swift") }
        #expect(files.count > 20, "the core's sources are found: \(files)")
        let allowed: Set<String> = ["ChatProtocol", "DequeModule"]
        for file in files {
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") {
                // `import X`, `@testable import X`, `@preconcurrency import X`, `import struct X.Y`.
                let words = line.split(separator: " ").filter { !$0.hasPrefix("@") }
                guard words.first == "import", words.count >= 2 else { continue }
                let module = words.count >= 3 && ["struct", "class", "enum", "func", "protocol", "typealias", "var", "let"].contains(words[1])
                    ? words[2].split(separator: ".")[0] : words[1].split(separator: ".")[0]
                #expect(allowed.contains(String(module)), "\(file) imports \(module)")
            }
        }
    }
}
