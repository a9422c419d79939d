// Test-only: the errors the tests catch are gRPC ServiceErrors (code, details) or StowageErrors
// (code, status), and ava's throwsAsync types them as plain Error; this lets a test read those
// fields without a cast at every assertion.
declare global {
  interface Error {
    code?: any;
    details?: string;
    status?: number;
  }
}
export {};
