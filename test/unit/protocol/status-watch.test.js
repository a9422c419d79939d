// When a node's status stream answers (src/protocol/status-watch.ts): shortly after each window's
// wall-clock boundary, where the load windows roll, and well before its middle, where gateways read.
import test from 'ava';
import { answerOffsetMs, msToNextAnswer } from '../../../dist/protocol/status-watch.js';

test('the next answer is the next boundary plus the offset, never in the window\'s second half', (t) => {
  const lengthMs = 2000;
  t.is(answerOffsetMs(lengthMs), 100);
  t.is(answerOffsetMs(250), 25, 'a short window: a tenth of it');
  t.is(msToNextAnswer(10_000, lengthMs), 100, 'at a boundary: its offset');
  t.is(msToNextAnswer(10_050, lengthMs), 50, 'within the offset: the same window\'s answer');
  t.is(msToNextAnswer(10_100, lengthMs), 2000, 'just answered: the next window\'s');
  t.is(msToNextAnswer(11_999, lengthMs), 101);
  for (let now = 0; now < 3 * lengthMs; now += 37) {
    const at = now + msToNextAnswer(now, lengthMs);
    t.true(at > now && at - now <= lengthMs, `from ${now}`);
    t.is(at % lengthMs, 100, `from ${now}: ${at}`);
  }
});
