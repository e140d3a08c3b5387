"""The mean-pooling classification head (``--classification-pooling mean``): the pooling by
hand, and each model family's head reading the mean of a row's non-padding features, whatever
the padding around the row."""

import pytest
import torch
from bert_models import build
from test_bidirectional_finetune import tiny as tiny_bidirectional

from fairseq_ext.modules.classification_heads import MeanPoolClassificationHead, mean_pool


def test_mean_pool_by_hand():
    features = torch.arange(2 * 3 * 2, dtype=torch.float).view(2, 3, 2)
    padding = torch.tensor([[False, False, True], [True, True, True]])
    pooled = mean_pool(features, padding)
    torch.testing.assert_close(pooled[0], (features[0, 0] + features[0, 1]) / 2)
    torch.testing.assert_close(pooled[1], torch.zeros(2))  # an all-padding row
    torch.testing.assert_close(mean_pool(features, None), features.mean(dim=1))


def head_by_hand(head, features, length):
    return head.out_proj(torch.tanh(head.dense(features[:length].mean(dim=0))))


@pytest.mark.parametrize("arch", ["bert_rab_tiny", "swishrnn_bert_tiny", "bert_orig_pooled_tiny",
                                  "roberta_pooled_prenorm"])
def test_bert_family_mean_head(arch):
    model, task = build(arch, classification_pooling="mean")
    model.eval()
    model.register_classification_head("sentence_classification_head", num_classes=3)
    head = model.classification_heads["sentence_classification_head"]
    assert isinstance(head, MeanPoolClassificationHead)
    pad = task.source_dictionary.pad()
    tokens = torch.randint(5, 59, (2, 9))
    tokens[1, 6:] = pad
    with torch.no_grad():
        logits, _ = model(tokens, classification_head_name="sentence_classification_head")
        features = model(tokens, features_only=True)[0]
        alone = model(tokens[1:, :6], classification_head_name="sentence_classification_head")[0]
    torch.testing.assert_close(logits[0], head_by_hand(head, features[0], 9))
    torch.testing.assert_close(logits[1], head_by_hand(head, features[1], 6))
    torch.testing.assert_close(logits[1], alone[0], atol=1e-5, rtol=1e-4)


def test_bert_family_default_head_reads_the_first_token():
    model, _ = build("bert_rab_tiny")
    model.register_classification_head("h", num_classes=2)
    assert not isinstance(model.classification_heads["h"], MeanPoolClassificationHead)


@pytest.mark.parametrize("r_bidir", ["0", "1"])
def test_bidirectional_lm_mean_head(r_bidir):
    model, task = tiny_bidirectional(r_bidir)
    model.args.classification_pooling = "mean"
    model.register_classification_head("sentence", num_classes=3)
    head = model.classification_heads["sentence"]
    assert isinstance(head, MeanPoolClassificationHead)
    pad = task.source_dictionary.pad()
    tokens = torch.randint(5, 20, (2, 8))
    tokens[1, 5:] = pad
    with torch.no_grad():
        logits, _ = model(tokens, classification_head_name="sentence")
        features = model(tokens, features_only=True)[0]
    torch.testing.assert_close(logits[0], head_by_hand(head, features[0], 8))
    torch.testing.assert_close(logits[1], head_by_hand(head, features[1], 5))
