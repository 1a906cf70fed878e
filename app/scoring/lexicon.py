"""The generic vocabulary: the discipline's stages, how a hypothesis is rejected or
endorsed, how engineers name each measurement, and which words say a number is about a
quantity. Patterns are case-insensitive regular expressions."""

from __future__ import annotations

import re

STAGES = ("step_boundary", "gaps", "overlap", "longest_kernel")
STAGE_LABELS = {"step_boundary": "step boundary", "gaps": "gaps", "overlap": "overlap",
                "longest_kernel": "longest kernel"}

# A stage is mentioned by a sentence that says one of these.
STAGE_PATTERNS = {
    "step_boundary": (
        r"\bstep (time |period |boundar\w*|length )?(is|of|was|takes|runs|at|=|~|≈)",
        r"\b(step|iteration|token|period)s? (boundar\w*|period|time|latency)\b", r"profilerstep",
        r"\bper (step|iteration|token)\b.{0,30}\d", r"\b(one|a single) (full |\w+ )?(step|iteration)\b", r"\bas the unit\b",
        r"\b(each|every) (step|iteration|token)\b.{0,40}\d+(\.\d+)? ?(ms|s|µs|us)\b",
        r"\b\d+(\.\d+)? ?(ms|s)\b (steps?|iterations?|per step|per token|period)",
        r"\b(inter-token latency|itl) (p50|median)\b", r"\b(p50|median) (itl|inter-token)",
        r"\b(step|iteration|token)s? (takes?|lasts?|runs?|is|are|of)\b.{0,20}\d", r"^\W*step\b[^.]{0,25}\d+(\.\d+)? ?(ms|s)\b",
    ),
    "gaps": (
        r"\bidle\b", r"\bgaps?\b", r"\bholes?\b", r"\bbubbles?\b", r"\bstarv\w*", r"\bwaiting\b", r"\bwaits\b",
        r"\bnothing (is )?running\b", r"\bstall\w*", r"\bempty\b", r"\bwall[- ]to[- ]wall\b", r"\bno gaps?\b",
        r"\bbusy\b.{0,20}\d+(\.\d+)? ?%", r"\bpicket fence\b", r"\bsits? (there|waiting)\b",
    ),
    "overlap": (
        r"\boverlap\w*", r"\bserializ\w*", r"\bconcurrent\w*", r"\bhidden\b", r"\bhides?\b", r"\bexposed\b",
        r"\bin parallel\b", r"\bafter backward\b", r"\bunder (the )?(backward|compute)\b", r"\bco-?schedul\w*",
        r"\bbehind (the )?compute\b", r"\bmixed (with|into) (the )?decode", r"\bno decode tokens\b",
        r"\b(alongside|together with) (the )?decode", r"\bcommunication\b.{0,30}\b(compute|backward)\b",
        # across ranks the question is whether the collective's time is transfer or waiting
        r"\b(nccl|collective|all-?reduce)\b.{0,40}\binclud\w* (the )?wait", r"\bwait\w* for the (slowest|last) rank",
    ),
    "longest_kernel": (
        r"\blongest kernel", r"\btop kernel", r"\bkernel (summary|mix|breakdown)", r"\bhottest\b",
        r"\b(top|longest|dominant|biggest|heaviest|slowest) (\w+ )?(gemm|kernel|gemv)s?\b",
        r"\bgemms?\b.{0,40}\b(% of|share|memory-bound|compute-bound|efficien\w*|healthy|fine|normal|tflop|slower|faster)",
        r"\bkern_sum\b", r"\bheaviest\b", r"\b(biggest|longest|largest) (thing|slice|bar|block|item)\b", r"\bdwarfs\b", r"\b(first|start with) (the )?(biggest|longest|top)\b",
        r"\bkernels?\b.{0,60}\b(healthy|fine|normal)\b", r"\binside (the |it\b|them\b|a kernel)",
        r"\bbusy\b.{0,40}\b(healthy|normal|fine)\b", r"\b(uniformly )?slow(er)? kernels\b", r"\bkernels? (are|look) (healthy|fine|normal)",
        r"\broofline\b", r"\bmemory[- ]bound\b", r"\bcompute[- ]bound\b", r"\barithmetic intensity\b",
        r"\bwhich kernel", r"\bkernel (family|families)\b", r"\btensor (pipe|cores?)\b",
    ),
}

# Rejecting a hypothesis. A negation counts when it governs the mention (a few words either
# side, in its clause); a verdict counts anywhere in the sentence.
# Speech written down drops apostrophes ("its not nccl", "that doesnt fit"): the
# contractions are listed whole, since "nt" alone ends "percent" and "want".
BARE_NOT = r"\b(dont|cant|isnt|wont|doesnt|didnt|wasnt|arent|werent|couldnt|wouldnt|shouldnt|hasnt|havent|aint)\b"
# "No longer waiting on the transfer" says what a fix changes, not that the transfer is
# innocent.
NEGATION = (r"(\bnot\b|n't\b|\bno\b(?!\s+longer\b)|\bnever\b|\bcannot\b|\bnor\b|\brather than\b|\binstead of\b|\bnowhere near\b|"
            + BARE_NOT + ")")
VERDICT = (
    r"\b(don't|do not|dont|wouldn't|would not) (\w+ )?(buy|trust)\b", r"\b(math|arithmetic|numbers?) (checks|holds|adds up)\b", r"\b(set|setting|put|putting|leave|leaving) (\w+\W+){0,6}aside\b", r"\blies\b",
    r"\brule[sd]?\b.{0,15}\bout\b", r"\b(cross|crossed|write|wrote|written) (\w+\W+){0,4}off\b", r"\btempting\b",
    r"\bred herring\b", r"\bdistraction\b", r"\breject\w*", r"\bconsidered and\b", r"\bunlikely\b", r"\bimplausible\b",
    r"\bnot plausible\b", r"\bdismiss\w*", r"\b(doesn't|does not|can't|cannot|couldn't|won't) (explain|produce|account|"
    r"add up|make|cause|give|close|fit|reach|matter|be)\b", r"\bnowhere near\b", r"\bfar (from|short of)\b",
    r"\bchecks out\b", r"\bmisleading\b", r"\b(a|the|an) (\w+ ){0,3}lie\b", r"\blying\b", r"\b(that's|thats|that is|this is|which is|would be|is just) wrong\b",
    r"\bwrong (guess|answer|call|suspect|tree|lead|conclusion|read)\b", r"\bthe trap\b", r"\bnot the (bug|problem|cause|issue|bottleneck)\b",
    r"\bisn't (the|broken|slow|it|what|why)\b", r"\bis not (the|broken|slow|it|what|why)\b", r"\bonly (explains?|accounts? for|"
    r"buys?|gets?|moves?|saves?)\b", r"\bwould only\b", r"\boverrule\w*", r"\bdoesn't (hold|fit|survive)\b", r"\bnope\b",
    r"^\W*(not|no)\b", r"\b(don't|doesn't|won't) (move|change|help)\b", r"\bnot (broken|pathological|the bug)\b",
    r"\bi disagree\b", r"\bis (fine|acceptable|reasonable|healthy|normal|unremarkable|real)\b",
    # a counterfactual: "I'd be surprised if NCCL were the bottleneck", "if the copy were it, ..."
    r"\b(surprised|shocked|amazed) if\b", r"\bif\b[^,.;:]{0,40}\bwere\b",
    r"\b(that's|that is|it's|it is|this is) not (it|that|the (one|answer|story))\b", r"\bat best\b",
)
# A cause said in the negative is asserted, not denied: "two workers can't keep up", "not
# enough workers", "the bucketing isn't kicking in", "the hooks never fire".
SHORTFALL = (r"(\bnot\b|n't\b|\bnever\b|\bcannot\b|\bno longer\b)(\s+\w+){0,2}?\s+(keep(ing)? up|keep pace|enough|"
             r"fast enough|sufficient|kick(s|ing)? in|fir(e|es|ing)|trigger(s|ing|ed)?|happen(s|ing)?|work(s|ing)?|"
             r"overlap(s|ping)?|hid(e|es|ing|den))\b",)
# A cause ruled out in so many words (said in the clause that names it).
DENIAL = (r"\brule[sd]? (\w+\W+){0,4}out\b", r"\brul(e|ing) out\b", r"\bred herring\b", r"\ba distraction\b",
          r"\b(set|put|leave) (\w+\W+){0,6}aside\b", r"\bnot (the|a|our) (problem|bottleneck|culprit|issue|cause)\b",
          r"\b(isn't|is not|aren't|are not) (the|a|our) (problem|bottleneck|culprit|issue|cause)\b")
# A verdict that opens the next sentence: "No." "Not plausible." "That doesn't hold."
VERDICT_OPENING = (r"^\W*(no\b|not\b|nope\b|wrong\b|but\b|i disagree|arithmetic first|do the (math|arithmetic)|"
                   r"that('s| is)? (not|wrong|impossible)|it('s| is)n't|doesn't|can't|nowhere|"
                   r"(the )?(math|arithmetic|numbers?) (says?|rules?|kills?|don't|doesn't))")
# Weighing alternatives: "either the copy or the loader", "could be GC, could be the prefill".
ALTERNATIVES = (r"\b(either|means|could be|might be|would be)\b.{0,40}\bor\b",
                r"\b(could|might) be\b.{0,60}\b(could|might) be\b", r"\b(one|another|other) possibilit(y|ies)\b")
# Posing a hypothesis to test it: attributed to someone else, named as the trap, or asked.
HYPOTHESIS = (
    r"\b(someone|somebody|anyone|people|the team|they|one|others?|everyone|management|a colleague|colleagues)\b.{0,20}"
    r"\b(will|would|might|may|could|says?|thinks?|suspects?|blames?|claims?|is convinced|argues?)\b",
    r"\b\w+ (could|might|would|will|may) (say|blame|argue|suggest|think|guess|suspect)\b",
    r"\byou'?d (think|say|guess|expect|blame|suspect)\b",
    r"\b(the )?(trap|obvious (guess|answer|suspect)|tempting (answer|fix|guess|story|read)|usual suspect)\b",
    r"\bshould (i|we) blame\b", r"\bcould (it|this|that|rank \d+|the \w+) (just )?(be|have)\b", r"\?",
    r"\bbefore (anyone|we|you)\b", r"\bfirst (thought|guess|instinct)\b", r"\bit (looks|seems) like\b",
    *ALTERNATIVES, r"\bhypothes\w+",
    # a course nearly taken: "I was about to suggest INT4", "my instinct was to go after syncs"
    r"\b(was|were) (about|going|ready|tempted) to\b", r"\bwould have\b", r"\bmy (instinct|initial|first)\b",
)
# Blame said of a thing, as a predicate after it ("the collective is the slow part", "the
# GEMVs are badly tuned") or as a frame before it ("the culprit is the copy", "my read is
# NCCL"): with a trap's subject in that place, the trap is the cause (trap._blames_part).
BLAME_AFTER = (r"\b(is|are|'s|'re) (the )?(real |main )?(bottleneck|problem|culprit|issue|cause|slow part|limit(er|ing)?|"
               r"ceiling)\b",
               r"\b(is|are) what('s| is)? (slow\w*|stretch\w*|drag\w*|limit\w*|hold\w*|eat\w*|kill\w*)",
               r"\b(is|are|'s|'re) (too |just |really |very )?slow\b", r"\bdominat\w*\b", r"\bcrawl\w*\b",
               r"\bunderperform\w*\b", r"\b(is|are) inefficient\b", r"\b(badly|poorly) (tuned|configured)\b",
               r"\b(kill|kills|killing|drag|drags|dragging|stretch|stretches)\b", r"\bholding (\w+ )?(back|up)\b",
               r"\bthat'?s (why|where the time goes)\b", r"\b(is|are) (overloaded|oversubscribed|saturated|at capacity)\b",
               r"\b(steal|compet|contend|hammer)\w*\b", r"\bunder-?deliver\w*\b")
BLAME_BEFORE = (r"\bthe (real |main )?(culprit|bottleneck|problem|issue|cause|reason) (is|was|:)",
                r"\bmy (read|hypothesis|guess|bet|diagnosis)\b", r"\b(comes?|came) from\b", r"\bbecause of\b",
                r"\bcaused by\b", r"\bput it on\b", r"\bit'?s (probably |likely |just |really )?(the|a|an)\b")
BLAME_REACH = 40  # characters between a trap's subject and the blame said of it

# A clause that blames something: with no trap in it, the read has a cause of its own.
CAUSE_CLAIM = (r"\bis the (real |main |actual |true )?(problem|cause|bottleneck|culprit|issue|lever|limit)\b",
               r"\bthe (real |main |actual )?(problem|bottleneck|culprit|issue|cause) is\b",
               r"\b(is|are|looks?|seems?) (too |really |very )?(slow|heavy|big|small|off|fragmented|inefficient|"
               r"expensive|the slow part)\b", r"\b(caused by|because of|due to)\b")
# A course said as an imperative, at the start of a clause: "Remove it", "Also try ...".
IMPERATIVE = (r"^\W*((also|then|and|just|next|first|so),? )?(remove|drop|cut|add|switch|move|replace|tune|autotune|retune|"
              r"try|quantize|run|rerun|re-run|check|bump|increase|upgrade|disable|enable|raise|set up|sweep|benchmark|"
              r"recount|redo|re-derive|rederive|swap|reseat|rewrite|keep|pin|set|use|get rid of|take (it |them )?out|"
              r"turn (it |them )?off|rebalance|freeze|call)\b")
# Endorsing it: the speaker's own cause or fix, said as such.
ENDORSE = (
    r"\bis the (problem|cause|bottleneck|culprit|issue|root cause|real ceiling|ceiling|limit)\b", r"\bcaused by\b",
    r"\bbecause of\b", r"\bdue to\b", r"\bthe fix\b", r"\bfix (it|this)\b", r"\bwe should\b", r"\bi'd\b", r"\bi would\b",
    r"\bi'll\b", r"\bneed to\b", r"\bmust\b", r"\blet's\b", r"\bsolution\b", r"\bproblem is\b", r"\bresponsible\b",
    r"\bto blame\b", r"\bguilty\b", r"\bwhich means\b", r"\bhas to be\b", r"\bthat's (why|what|where)\b",
    IMPERATIVE,
    r"\b(go|going|head|jump) straight (to|for|after|at)\b", r"\btake (it|this|that) straight to\b", r"\b(so|and) (remove|drop|cut|add|switch|replace|tune|autotune|retune|try|quantize|run|check)\b",
    r"\bgets? us (back|most)\b", r"\bclose the gap\b", r"^\W*fix\b", r"\b(take out|get rid of|turn off)\b",
    r"\bi think\b", r"\bmy (guess|bet|recommendation)\b", r"\brecommend\w*\b", r"\bthe (play|move|lever|answer) is\b",
    r"\bsmells like\b", r"\bthat's it\b", r"\b(fairly|pretty|quite) sure\b", r"(->|→|=>)",
    # proposing the course: "the obvious move is", "first thing I'd do", "I suggest", "Action:"
    r"\bobvious (move|fix|step|thing|lever|win|answer|next step)\b", r"\bfirst thing\b", r"\bi (suggest|propose)\b",
    r"\bsuggest\w*\b", r"\bthe (plan|action|next step|priority|remedy) is\b", r"^\W*(actions?|conclusion|diagnosis|verdict|"
    r"cause|root cause|fix|plan|next steps?|recommendation)\s*:", r"\bgo (after|with|for)\b", r"\battack\w*\b",
    r"\bfocus (on|is)\b",
    # saying it is the cause: a causal verb with the trap as its subject
    r"\b(is|are|was|were) (hurting|killing|stalling|slowing|eating|choking|starving|throttling|limiting|holding|"
    r"dragging|capping|bottlenecking|costing)\b", r"\b(hurts|kills|stalls|slows|chokes|starves|throttles|limits|drains|"
    r"costs|caps|explains)\b", r"\b(has|have) (a |some )?(problem|issue)s?\b", r"\b(is|are) (off|broken|misconfigured|degraded|"
    r"saturated|too slow|the slow part|underperforming)\b", r"\bi (suspect|believe|bet)\b",
    r"\bwhat'?s (eating|killing|hurting|slowing|stalling|holding)\b",
    # said plainly, as non-native speakers and transcripts do: "this is the reason of slow",
    # "the garbage collector is stopping the whole loop", "I will run nccl-tests and tune it"
    r"\b(the|main|real|whole) reason\b", r"\breason (of|for|why)\b", r"\bcaus(es|ing)\b",
    r"\b(is|are) (stopping|blocking|freezing|causing|creating)\b", r"\b(stops|blocks|freezes)\b",
    r"\b(i|we) will\b",
    # the cause named in a frame: "The culprit is X", "My read: X", "It's a no_sync problem",
    # "that's the bug", "which is why", "X is gating each iteration"
    r"\bthe (\w+ )?(culprit|bottleneck|problem|issue|cause|explanation|diagnosis|reason)( here)? (is|was|:)",
    r"\bmy (read|diagnosis|take|hypothesis|money|call)\b( is|:|,)", r"\bit'?s (a|an) (\w+[- ]?){0,2}(problem|issue|bug|mistake)\b",
    r"\bthat'?s (the|my|our) (bug|problem|issue|diagnosis|culprit|bottleneck|latency|loss|answer)\b",
    r"\b(which|that) is why\b", r"\bhence\b", r"\bi reckon\b", r"\b(is|are) (gating|serializing|starving)\b",
    r"\bclassic (mistake|bug)\b",
    # a plan announced: "My plan: ...", "Step one: ...", "Let me ...", "I'm going to ..."
    r"\bmy (plan|first move|next move|first step|next step)\b", r"\bstep one\b", r"\blet me\b",
    r"\b(i'm|im|i am) going to\b",
    r"\b(the team|they|people|everyone|you|he|she)('re| are| is| was| were) right\b",
    r"\bid (go|run|do|look|check|start|try|flip|suggest|bet|rather|expect|add|fix|move|tune|switch|turn|use|put|"
    r"recommend|bump|increase|change|restructure|attack|focus|push|size|scale|retune|rerun|profile|make|get|set)\b",
)

# An endorsement said without commitment: hedged and proposing nothing, or a fix on the
# side of the main one. The scorer cannot tell such a read's stance with confidence: it
# asks for a review and does not cap (capping a strong read costs far more than missing a
# weak one). A proposed action (COMMIT) is commitment whatever the hedge.
HEDGE = (r"\b(could|might|may)\b", r"\bmaybe\b", r"\bperhaps\b", r"\bpossibl[ey]\b", r"\bi guess\b",
         r"\bnot (sure|certain)\b", r"\bi suppose\b", r"\bprobabl[ey]\b", r"\blikely\b", r"\bi suspect\b",
         r"\bmy (guess|hunch)\b", r"\bseems?\b")
# Of those, the ones that say doubt rather than a belief said softly ("I suspect",
# "probably"): a read whose only hypothesis is doubted has not committed to it.
DOUBT = (r"\b(could|might|may)\b", r"\bmaybe\b", r"\bperhaps\b", r"\bpossibl[ey]\b", r"\bnot (sure|certain)\b",
         r"\bi suppose\b", r"\bi wonder\b", r"\bno idea\b")
# Looking into it, not backing it: "I'd check whether X", "is X related?", "open
# question": the trap posed for a measurement to settle, which is what a good read does.
# Said before the mention (what is checked is the trap), not after it ("run nccl-tests to
# see if ..." is the trap's own course).
INVESTIGATE = (r"\b(check|verify|confirm|see|test|find out|look (at|into)|investigate|measure|figure out|ask|know)\b"
               r".{0,40}\b(whether|if)\b", r"\bworth (checking|a look|looking|ruling)\b", r"\bopen questions?\b",
               r"\bwant (more data|to know|to see|to check|to confirm)\b", r"\bto rule (it|that|this) out\b",
               r"\bto (be|make) (sure|certain)\b", r"\bjust in case\b",
               # a check of the trap, not its course: "double-check the MFU math", "sanity-check NCCL"
               r"\b(double|sanity|cross)[- ]?check\w*\b")
# Looking, not changing: a course that only measures ("I'd compare against nccl-tests
# numbers", "we should look at the memcpy rows", "pull per-rank timings ... to tell"). Not
# "check", "rerun" or "verify": "check the switch", "rerun without the profiler" are traps'
# own courses.
LOOK = (r"\b(look(ing)? (at|into|for)|compar(e|ing)|pull(ing)?|inspect\w*|examin\w*|cross-?check\w*|dig(ging)? into|"
        r"keep an eye on|find out|see (what|whether|if|how))\b", r"\bto (know|tell|see|find out|be sure)\b",
        r"\bcheck(ing)? (the )?(\w+ ){0,2}(rows?|trace|timeline|logs?|summary|counters?|output|args) (for|to)\b",
        r"\bcheck (the )?(\w+ ){0,2}(counters?|durations?|times?|numbers?|readings?)\b",
        r"\b(measur\w*|quantif\w*|confirm\w*|count (how|the))\b", r"\bnote (the |it |\w+ as\b)",
        r"\b(as a candidate|something to (measure|quantify|check)|things to (measure|check)|in or out)\b",
        r"\b(settle|decide|tell)s? (that|it|this|which)\b", r"\beither way\b")
# Changing something: with one of these in its claim a course is a fix, not a look.
FIXING = (r"\b(fix\w*|tun(e|es|ed|ing)|retun\w*|autotun\w*|replac\w*|reseat\w*|upgrad\w*|remov\w*|drop\w*|swap\w*|"
          r"switch\w*|rebalanc\w*|add(ing)?|increas\w*|quantiz\w*|enabl\w*|disabl\w*|freez\w*|rais\w*|set(ting)?|"
          r"bump\w*|cut(ting)?|move|moving|re-?image\w*|restart\w*|rewrit\w*|chang\w*|turn\w* (on|off)|get rid)\b",)
# Put off: a course for later, once more is known.
DEFER = (r"\b(later|at some point|eventually)\b", r"\bbefore (committing|deciding|saying|concluding|blaming)\b",
         r"\b(need|needs|want|get|gather|collect|with) (\w+ )?more data\b")  # not "not more data": a finding
# A read that says it has not made up its mind: its hedged hypothesis is not a commitment.
UNDECIDED = DEFER + (r"\b(don't|do not|dont) know yet\b", r"\bnot sure yet\b", r"\btoo early\b",
                     r"\bbefore (i|we) (commit|decide|conclude)\b", r"\bundecided\b", r"\bcan't (tell|say) yet\b")
# A conclusion drawn ("So NCCL is slow on every rank"): with a trap's words of fault in the
# mention, an endorsement however plainly it is said.
CONCLUSION = r"^\W*(so|therefore|hence|thus|which means)\b"
FAULT_WORDS = r"\b(slow(er)?|broken|misconfig\w*|degraded|bad|faulty|bottleneck|problem|culprit|inefficient)\b"
# A fault said with a negation: "isn't being detected right", "not configured properly".
# ("didn't train properly": n't has no word boundary before it). A quality denied is a
# fault asserted: "NVLink isn't at full bandwidth", "the link isn't healthy".
FAULT = (r"(\bnot\b|n't\b)(\s+\w+){0,4}\s+(right|correct(ly)?|properly|as expected)\b",
         r"(\bnot\b|n't\b)\s+(good|well)\s+(configured|set up|tuned)\b",
         r"(\bnot\b|n't\b)\s+(using|hitting|reaching|getting|running at)\b",
         r"(\bnot\b|n't\b)(\s+\w+){0,2}\s+(at full|up to (speed|spec)|at (spec|rated)|healthy|working|running at full)\b",
         r"\b(came back|configured|set up|wired|detected|negotiat\w*|tuned|built) (\w+ )?wrong\b")
COMMIT = (r"\bwe should\b", r"\bi'd\b", r"\bid (go|run|do|try|flip|fix|tune|switch|turn|use|add|bump|retune)\b", r"\bi would\b", r"\blet's\b", r"\bneed to\b", r"\bmust\b", r"\bthe fix\b",
          r"\bfix (it|this)\b", r"\brecommend\w*\b", r"\b(so|and) (remove|drop|cut|add|switch|replace|tune|autotune|"
          r"retune|try|quantize|run|check)\b", r"\bthe (play|move|lever|answer) is\b", r"\bobvious (move|fix|step)\b",
          r"\bi (suggest|propose)\b", r"^\W*(actions?|fix|plan|next steps?)\s*:",
          r"\bmy (plan|first move|next move|first step|next step)\b", r"\bstep one\b", r"\blet me\b",
          r"\b(i'm|im|i am) going to\b")
SECONDARY = (r"\bwhile (we're|we are|i'm|i am) at it\b", r"\bon top\b", r"\bas a bonus\b", r"\bnice to have\b",
             r"\bsecondary\b", r"\bminor (thing|cleanup|fix)\b",
             # for later, once the main fix is in: "a reasonable follow-on after that"
             r"\bfollow-?on\b", r"\bfollow-?up\b", r"\bafter that\b", r"\bafterwards\b", r"\bonce (that|this|it|we)\b",
             r"\b(second|next|later) (step|phase|pass)\b",
             # "then revisit NCCL tuning for the last few points, in that order"
             r"\b(last|remaining|leftover) (few )?(points|percent|bit|tail|ms)\b", r"\bin that order\b",
             r"\bthen (revisit|look at|tune|try)\b")
# A read taking back what it said: a later rejection of the trap counts as a correction
# (no cap) when one of these says so, in its sentence or the one before (or when it does
# the arithmetic, or proposes nothing itself: trap.trap_criterion).
CORRECTION = (r"\bactually\b(?!,? (yes|yeah|right)\b)", r"\bon second thought\b", r"\bwait\b", r"\bscratch that\b", r"\bi was wrong\b",
              r"\bturns out\b", r"\bhold on\b", r"\blooking (closer|again)\b", r"\bthat's wrong\b", r"\bno,",
              r"\bmy first (thought|guess|instinct)\b", r"\bat first\b", r"\bi'd be tempted\b", r"\btempt\w*\b")

# A sentence that turns away from what the read said before ("But ...", "Hmm, no."): with
# the true cause asserted after it, a correction (trap.last_turn_to_cause).
TURN_OPENING = (r"^\W*((hmm+|um+|uh+|well|ok(ay)?|wait),?\s+)?(but|however|then again|except|no|nope|wrong|"
                r"not really|not so fast|scratch that)\b")

# Words around an outcome: what the fix leaves behind.
OUTCOME = (r"\bexpect\w*", r"\bafter\b", r"\bwould\b", r"\bshould\b", r"\bgoes\b", r"\bdrops?\b", r"\bfalls?\b",
           r"→|->", r"\bdown to\b", r"\bbecomes?\b", r"\bfix\w*\b", r"\bwin\b", r"\bsav\w+\b", r"\bto ~?\d")

# A change said about a quantity ("cuts the step from 622 ms to 415 ms"): then "from A to B"
# is before and after, not two positions read off the ruler.
CHANGE = (r"\b(cut|cuts|drops?|dropp\w*|reduc\w*|brings?|go(es)?|went|falls?|shrinks?|improv\w*|speeds? up|fix\w*|"
          r"would|should|expect\w*|after|sav\w+|down|lower\w*|rais\w*|increas\w*|decreas\w*|moves?)\b",)

# How people name each measurement (tool id -> patterns).
MEASUREMENTS = {
    "nsys-kern-sum": (r"cuda_gpu_kern_sum", r"\bkern_sum\b", r"nsys stats", r"kernel summary",
                      r"count(ing)? (the )?(nccl )?kernel (instances|launches|calls)",
                      r"(number|count) of (nccl |all-?reduce )?kernels? per step", r"kernel instances"),
    "nsys-api-sum": (r"cuda_api_sum", r"\bapi_sum\b", r"cuda api summary", r"count(ing)? (the )?(cudaLaunchKernel|launch(es)?)",
                     r"cudalaunchkernel (calls|count)", r"launches per token", r"api (row|summary)"),
    "nsys-nvtx-sum": (r"nvtx_sum", r"nvtx (range )?summary", r"annotation summary"),
    "nsys-mem-sum": (r"mem_(time|size)_sum", r"memcpy summary", r"memory operations? summary"),
    "per-rank": (r"per[- ]rank (step|time|compute|breakdown|decomposition|timing)", r"compare (the )?ranks",
                 r"each rank.{0,20}(time|compute)", r"max(imum)?\s*/\s*median", r"across ranks", r"all ranks' traces"),
    "nvidia-smi": (r"nvidia-smi", r"\bclocks?\b.{0,30}\bthrottl\w*", r"throttle reasons?", r"clock event reasons?"),
    "dcgm": (r"\bdcgm\w*", r"DCGM_FI_\w+"),
    "ncu": (r"\bncu\b", r"nsight compute", r"speed of light", r"\bsol\b", r"roofline (point|analysis|chart)",
            r"dram throughput"),
    "gemm-microbench": (r"micro-?bench\w*", r"torch\.matmul", r"benchmark (the|a|that) gemm", r"isolated gemm"),
    "synthetic-data": (r"synthetic[- ](data|dataset|batch\w*|input)", r"fake data", r"torch\.randn", r"in-memory (data|batch\w*)",
                       r"(random|dummy) (tensors|data|batch\w*)"),
    "cuda-graph": (r"cuda[- ]?graph\w*", r"torch\.compile", r"reduce-overhead", r"cudagraphlaunch"),
    "ddp-debug": (r"torch_distributed_debug", r"bucket count", r"_rebuild_buckets", r"ddp (logging|debug)"),
    "request-log": (r"request log", r"benchmark_serving", r"per-request", r"ttft (per|by) request"),
    "itl-scatter": (r"scatter", r"(plot|correlat\w*|line up|lines up|chart) .{0,40}(itl|inter-token|latency).{0,40}prefill",
                    r"(itl|inter-token latency|latency) (against|vs\.?|versus) .{0,20}prefill",
                    r"prefill tokens per iteration"),
}

# Words that say a number is about an observation, by the words of its id and label.
SYNONYMS = {
    "step": ("step", "iteration", "period", "per step"), "iteration": ("iteration", "step", "period"),
    "allreduce": ("all-?reduce", "allreduce", "nccl", "comm\\w*", "collective"),
    "nccl": ("nccl", "all-?reduce", "comm\\w*", "collective"), "comm": ("comm\\w*", "nccl", "all-?reduce"),
    "idle": ("idle", "gaps?", "holes?", "bubbles?", "waits?", "waiting", "starv\\w*"),
    "gap": ("gaps?", "idle", "holes?", "bubbles?"), "wait": ("wait\\w*", "idle", "gaps?", "blocked"),
    "busy": ("busy", "compute", "active", "kernels?"), "compute": ("compute", "busy", "fwd|forward|bwd|backward"),
    "busbw": ("busbw", "bus ?bandwidth", "bandwidth", "GB/s"), "mfu": ("mfu", "utili[sz]ation", "flops utilization"),
    "speedup": ("speed-?up", "faster", "throughput", "improvement", "gain", "win"),
    "kernels": ("kernels?", "launch\\w*", "instances"), "buckets": ("buckets?", "all-?reduces?"),
    "gemm": ("gemms?", "matmul", "m ?=", "shape"), "m": ("m ?=", "\\bm\\b", "rows", "micro-?batch", "tokens"),
    "ridge": ("ridge",), "intensity": ("intensity", "flop/b\\w*", "ai\\b"), "ai": ("intensity", "\\bai\\b", "flop/b"),
    "itl": ("itl", "inter-?token", "token latency", "latency"), "ttft": ("ttft", "time to first token", "first token"),
    "p99": ("p99", "99th", "tail"), "p50": ("p50", "median", "typical"), "prefill": ("prefill", "prompt"),
    "clock": ("clock", "mhz", "throttl\\w*"), "sm": ("sm clock", "clock", "mhz"),
    "rank": ("rank", "gpu \\d"), "straggler": ("straggler", "slow rank", "rank \\d", "late"),
    "h2d": ("h2d", "htod", "host.to.device", "memcpy", "copy"), "dataloader": ("data ?loader", "input", "loader", "next"),
    "workers": ("workers?",), "supply": ("supply", "workers?", "images/s", "img/s", "decode"),
    "demand": ("demand", "consum\\w*", "gpu (eats|needs|wants)", "images/s", "img/s"),
    "token": ("token", "decode step", "per token", "itl"), "mean": ("mean", "average", "avg", "typical"),
    "floor": ("floor", "lower bound", "minimum", "bandwidth bound", "weights"),
    "weight": ("weights?",), "expected": ("expect\\w*", "after", "should", "would", "fix\\w*", "target"),
    "share": ("share", "%", "of the", "fraction"), "pct": ("%", "percent"), "top": ("top", "longest", "dominant", "biggest"),
    "dram": ("dram", "hbm", "memory (throughput|bandwidth)"), "tensor": ("tensor", "compute throughput", "sm throughput"),
    "microbench": ("micro-?bench\\w*", "matmul", "benchmark"), "fwd": ("forward", "fwd"), "bwd": ("backward", "bwd"),
    "opt": ("optimizer", "adam\\w*", "opt\\b"), "chunk": ("chunk\\w*",), "streams": ("streams?", "concurrent", "users"),
    "spike": ("spike", "stall", "freeze", "p99", "jump"),
}
STOP = set("the a an of in on at per to for by with and or its it is as from one each every all this that "
           "ms us pct gbps mhz gb tflops kernels tokens x s".split())


# Context words: they say where a quantity was measured, not which one it is ("NCCL
# kernels per step" is about NCCL kernels); an observation keeps one only when its id
# leads with it ("step_ms") or it has no other words.
GENERIC = {"step", "steps", "per", "end", "iteration", "iterations", "token", "tokens"}


def words_of(obs: dict) -> list[str]:
    """The cue patterns of an observation: its id's and label's words and their synonyms."""
    raw = re.split(r"[_\W]+", obs["id"].lower()) + re.findall(r"[a-z][a-z0-9-]+", obs.get("label", "").lower())
    raw = [w for w in raw if w and w not in STOP and len(w) >= 2]
    head = obs["id"].split("_")[0]  # what the id leads with is what it is ("step_ms")
    distinctive = [w for w in raw if w not in GENERIC or w == head]
    out: list[str] = []
    for w in distinctive or raw:
        out += SYNONYMS.get(w, ()) or [re.escape(w)]
    return list(dict.fromkeys(out))
