// libFuzzer target: bytes as a scenario of connections, frames, time steps and commits driven
// through ChatCore (see ChatCoreFuzzProperties). Built by Scripts/fuzz.sh against a
// .build-fuzz-roomlog build of RoomLog; not part of the SwiftPM package.

/// libFuzzer's entry point: traps when a scenario breaks an invariant of the chat core.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzChatCore(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let violation = ChatCoreFuzzProperties.check(input) { fatalError(violation) }
    return 0
}
